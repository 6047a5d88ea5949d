"""What the service benchmarks watch: when model requests arrive, and what they carry.

:class:`Probe` is the demo model's ``record`` hook: it notes the time of every request, by
the turn's prompt id, and the first request that carried each message id, and lets a
benchmark wait for either. :class:`TimedWork` is the demo's ``work`` tool, noting when each
call ends (a step starts when the tool's result is in).
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable

from steerable.models.base import ModelRequest
from steerable.service.agent import ReActAgent
from steerable.service.demo import DemoModel, turn_of_request
from steerable.spec import Spec
from steerable.tools import Tool, tool


class Probe:
    """Request times by prompt id, and the first request time of each message id."""

    def __init__(self) -> None:
        self.requests: dict[str, list[float]] = defaultdict(list)
        self.first: dict[str, float] = {}
        self._waiters: dict[str, list[asyncio.Future[float]]] = defaultdict(list)

    def __call__(self, request: ModelRequest) -> None:
        now = time.perf_counter()
        mine = turn_of_request(request.messages)
        if mine:
            self.requests[mine[0].id].append(now)
        for message in request.messages:
            if message.id not in self.first:
                self.first[message.id] = now
                for waiter in self._waiters.pop(message.id, []):
                    if not waiter.done():
                        waiter.set_result(now)

    async def carried(self, id: str, *, within: float) -> float:
        """When a request first carried the message ``id`` (waiting for it if need be)."""
        if id in self.first:
            return self.first[id]
        waiter = asyncio.get_running_loop().create_future()
        self._waiters[id].append(waiter)
        return await asyncio.wait_for(waiter, within)


class TimedWork:
    """The ``work`` tool of the demo agent, noting when each call ended."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.ended: list[float] = []

    def tool(self) -> Tool:
        """The tool, named ``work`` as the demo model calls it."""

        async def work(step: int) -> str:
            """Do one step of work."""
            await asyncio.sleep(self.seconds)
            self.ended.append(time.perf_counter())
            return f"step {step} done"

        made: Tool = tool(work)
        return made


def agent(probe: Callable[[ModelRequest], object], work: TimedWork, *, calls: int) -> ReActAgent:
    """The demo agent (its model and a timed ``work``), ``calls`` tool calls per turn."""
    spec = Spec(
        tools=[work.tool()],
        max_steps=calls + 4,
        steers_per_turn=16,
        instructions="Do the work, then answer every message of the turn.",
    )
    return ReActAgent(spec, DemoModel(calls=calls, record=probe))
