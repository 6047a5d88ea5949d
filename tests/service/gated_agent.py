"""An agent for ``steerable serve`` tests whose tool calls wait for the test to open a gate.

``work(step)`` returns once the file ``$STEERABLE_TEST_GATE.<step>`` exists, so "the turn is
still running" is certain while the test does what it needs, rather than a race with a timer.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from steerable.service.agent import ReActAgent
from steerable.service.demo import DemoModel
from steerable.spec import Spec
from steerable.tools import tool


@tool
async def work(step: int) -> str:
    """Do one step of work, once the test lets it."""
    gate = Path(f"{os.environ['STEERABLE_TEST_GATE']}.{step}")
    for _ in range(1200):  # a minute at most, so a broken test cannot hang here
        if await asyncio.to_thread(gate.exists):
            return f"step {step} done"
        await asyncio.sleep(0.05)
    return "the gate never opened"


def two_gated_calls() -> ReActAgent:
    """Two ``work`` calls a turn, each held until its gate opens, then the demo's answer."""
    return ReActAgent(Spec(tools=[work], max_steps=6), DemoModel(calls=2))
