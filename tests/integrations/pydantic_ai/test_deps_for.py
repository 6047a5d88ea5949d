"""``deps_for``: each turn's run gets the deps made from its session id."""

from __future__ import annotations

import pytest
from pydantic_ai import Agent, RunContext
from pydantic_ai.models.test import TestModel

from steerable import UsageError
from steerable.integrations.pydantic_ai import PydanticAIAgent
from steerable.service import Service
from steerable.stores.memory import MemoryStore


async def test_each_session_runs_with_the_deps_made_for_it() -> None:
    agent = Agent(TestModel(call_tools=["whose"]), deps_type=str)
    seen: list[str] = []

    @agent.tool
    async def whose(ctx: RunContext[str]) -> str:
        """Whose deps these are."""
        seen.append(ctx.deps)
        return ctx.deps

    served = PydanticAIAgent(agent, deps_for=lambda session: f"deps of {session}")
    assert served.steers_per_turn == 16
    service = Service(MemoryStore(), served, poll=0.05)
    async with service.serving():
        for session in ("a", "b"):
            sent = await service.send(session, "hi")
            done = await service.wait(session, sent.id, seconds=10)
            assert done is not None and done.state == "completed"
    assert seen == ["deps of a", "deps of b"]
    with pytest.raises(UsageError, match="not both"):
        PydanticAIAgent(agent, deps="x", deps_for=lambda session: session)
