"""``context_for``: each turn's run gets the context made from its session id."""

from __future__ import annotations

import pytest
from agents import Agent, RunContextWrapper, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from steerable import UsageError
from steerable.integrations.openai_agents import OpenAIAgentsAgent
from steerable.service import Service
from steerable.stores.memory import MemoryStore


async def test_each_session_runs_with_the_context_made_for_it() -> None:
    seen: list[str] = []

    @function_tool
    async def whose(ctx: RunContextWrapper[str]) -> str:
        """Whose context this is."""
        seen.append(ctx.context)
        return ctx.context

    call = [function_call("whose", {}, call_id="c")]
    model = ScriptedModel([call, [assistant_message("a")], call, [assistant_message("b")]])
    agent = Agent[str](name="a", model=model, tools=[whose])
    served = OpenAIAgentsAgent(agent, context_for=lambda session: f"context of {session}")
    service = Service(MemoryStore(), served, poll=0.05)
    async with service.serving():
        for session in ("a", "b"):
            sent = await service.send(session, "hi")
            done = await service.wait(session, sent.id, seconds=10)
            assert done is not None and done.state == "completed"
    assert seen == ["context of a", "context of b"]
    with pytest.raises(UsageError, match="not both"):
        OpenAIAgentsAgent(agent, context="x", context_for=lambda session: session)
