"""A tool that holds its call until the test lets it go, so a steer lands mid-tool for sure."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from steerable import Message, Runner, Spec, Tool, tool
from steerable.models.base import Model
from steerable.runner import Result


@dataclass
class Gate:
    """``search`` waits inside each call until ``release``; ``started`` says it is waiting."""

    started: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def tool(self) -> Tool:
        gate = self

        @tool
        async def search(q: str, n: int = 1) -> str:
            """Search the files for ``q``."""
            gate.started.set()
            await gate.release.wait()
            return f"{n} hit for {q}: config.toml"

        return search


async def run_with_steer(
    spec: Spec, messages: str | list[Message], model: Model, gate: Gate, steer: str
) -> Result:
    """Run; while the first tool call waits, steer the run, then let the tool finish."""
    run = Runner.start(spec, messages, model)
    started = asyncio.ensure_future(gate.started.wait())
    ended = asyncio.ensure_future(run)
    done, _ = await asyncio.wait({started, ended}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
    if started not in done:
        started.cancel()
        raise AssertionError(f"the tool was never called: {await ended}")
    run.steer(steer)
    gate.release.set()
    return await run
