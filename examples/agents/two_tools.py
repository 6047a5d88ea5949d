"""A keyless agent for ``steerable serve --agent``, slow enough to steer by hand.

    steerable serve --store sqlite:///service.db --agent examples.agents.two_tools:AGENT
    steerable chat --url http://127.0.0.1:8000

Each turn calls the ``work`` tool twice, each call taking ``STEERABLE_TOOL_SECONDS`` seconds
(3 by default), then answers with every user message of the turn, in order: type a line
while a tool runs and the answer shows it, taken at the next step. The model is
:class:`steerable.service.demo.DemoModel`, which follows rules and needs no key; swap in a
real one with ``ReActAgent(spec, model_from_string("openai:gpt-5-mini"))``.
"""

from __future__ import annotations

import asyncio
import os

from steerable import Spec, tool
from steerable.service import ReActAgent
from steerable.service.demo import DemoModel


@tool
async def work(step: int) -> str:
    """Do one step of the work."""
    await asyncio.sleep(float(os.environ.get("STEERABLE_TOOL_SECONDS", "3")))
    return f"step {step} done"


def make_agent(calls: int = 2) -> ReActAgent:
    """The agent: ``calls`` slow tool calls a turn, then the answer."""
    spec = Spec(
        tools=[work],
        max_steps=calls + 4,
        instructions="Do the work, then answer every message of the turn.",
    )
    return ReActAgent(spec, DemoModel(calls=calls))


AGENT = make_agent()
