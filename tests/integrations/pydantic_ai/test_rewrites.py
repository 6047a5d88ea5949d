"""A run's history rewritten under the capability, and usage limits striking mid-run."""

from __future__ import annotations

import copy

import pytest
from pydantic_ai import Agent
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.exceptions import UsageLimitExceeded
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.usage import UsageLimits

from steerable import Session, UsageError, transcript_problems
from steerable.integrations.pydantic_ai import Steering, history
from steerable.stores.memory import MemoryStore
from tests.integrations.pydantic_ai.support import Script, call, problems, say, view


def _steered_tool(agent: Agent[None, str], session: Session, at: int) -> None:
    """A ``work`` tool that leaves a steer in ``session`` during its call number ``at``."""
    calls = 0

    @agent.tool_plain
    async def work() -> str:
        """Some work."""
        nonlocal calls
        calls += 1
        if calls == at:
            await session.steer("use the cache", id="st-1")
        return "worked"


async def test_a_processor_that_drops_the_last_stored_message_fails_the_step() -> None:
    session = Session("s", MemoryStore())
    script = Script(call("work", "c1"), say("never"))
    agent = Agent(script.model, capabilities=[ProcessHistory(lambda ms: ms[-2:])])
    _steered_tool(agent, session, at=1)
    steering = await Steering.load(session)
    with pytest.raises(UsageError, match="no longer holds the last message stored"):
        await agent.run("go", capabilities=[steering])
    # nothing stored out of place, the steer not taken: it waits for a run that can carry it
    assert [m.text for m in await session.messages()] == ["go"]
    assert [s.id for s in await session.steers()] == ["st-1"]
    assert len(script.requests) == 1


def _redacted(messages: list[ModelMessage]) -> list[ModelMessage]:
    """Every text replaced: new parts, equal to none the store gave."""
    return [
        ModelRequest(parts=[UserPromptPart("[redacted]") for _ in m.parts])
        if isinstance(m, ModelRequest)
        else ModelResponse(parts=[TextPart("[redacted]") for _ in m.parts])
        for m in messages
    ]


async def test_a_processor_that_rewrites_the_stored_history_fails_rather_than_store_it_twice() -> (
    None
):
    session = Session("s", MemoryStore())
    await Agent(Script(say("one")).model).run("first", capabilities=[await Steering.load(session)])
    before = await session.messages()
    agent = Agent(Script(say("two")).model, capabilities=[ProcessHistory(_redacted)])
    steering = await Steering.load(session)
    with pytest.raises(UsageError, match="does not start from the stored transcript"):
        await agent.run("second", message_history=steering.history, capabilities=[steering])
    assert await session.messages() == before


async def test_a_processor_that_copies_every_message_stores_each_once() -> None:
    session = Session("s", MemoryStore())
    script = Script(say("one"), call("work", "c1"), say("two"))
    agent = Agent(script.model, capabilities=[ProcessHistory(copy.deepcopy)])
    _steered_tool(agent, session, at=1)
    first = await Steering.load(session)
    await agent.run("first", capabilities=[first])
    second = await Steering.load(session)
    await agent.run("second", message_history=second.history, capabilities=[second])
    stored = await session.messages()
    # the history the second run was given is not stored again; the steer once, in place
    assert [(m.text, m.steered) for m in stored if m.text] == [
        ("first", False),
        ("one", False),
        ("second", False),
        ("use the cache", True),
        ("two", False),
    ]
    assert view(history(stored)) == [*script.views()[-1], "say:two"]
    assert transcript_problems(stored) == []


async def test_a_request_limit_stores_the_run_up_to_where_it_struck_and_takes_no_steer() -> None:
    session = Session("s", MemoryStore())
    script = Script(call("work", "c1"), call("work", "c2"), say("done"))
    agent = Agent(script.model)
    _steered_tool(agent, session, at=2)  # after the last step the limit lets the run take
    steering = await Steering.load(session)
    with pytest.raises(UsageLimitExceeded):
        await agent.run("go", capabilities=[steering], usage_limits=UsageLimits(request_limit=2))
    stored = await session.messages()
    asked = ["user:go", "call:c1", "return:c1", "call:c2", "return:c2"]
    assert view(history(stored)) == asked  # the second call's return is stored too
    assert steering.taken == [] and [s.id for s in await session.steers()] == ["st-1"]
    # the next run carries on from there, the steer at its first request, after the return
    nxt = await Steering.load(session)
    result = await agent.run(None, message_history=nxt.history, capabilities=[nxt])
    assert result.output == "done"
    assert script.views()[-1] == [*asked, "user:use the cache"]
    assert [m.id for m in await session.messages() if m.steered] == ["st-1"]


def _last_returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    last = messages[-1]
    assert isinstance(last, ModelRequest)
    return [p for p in last.parts if isinstance(p, ToolReturnPart)]


async def test_a_tool_call_limit_stores_the_calls_it_stopped_with_interrupted_returns() -> None:
    session = Session("s", MemoryStore())
    script = Script(call("work", "c1"), call("work", "c2"), say("done"))
    agent = Agent(script.model)
    _steered_tool(agent, session, at=0)
    steering = await Steering.load(session)
    with pytest.raises(UsageLimitExceeded):
        await agent.run("go", capabilities=[steering], usage_limits=UsageLimits(tool_calls_limit=1))
    stored = await session.messages()
    # the second call never ran: stored with the return Pydantic AI's repair gives it, so the
    # transcript is one a provider takes, and the next run is sent just what is stored
    assert transcript_problems(stored) == []
    rebuilt = history(stored)
    assert [(p.tool_call_id, p.outcome) for p in _last_returns(rebuilt)] == [("c2", "interrupted")]
    assert problems(rebuilt) == ["4: returns ['c2'] were made up by the repair"]
    nxt = await Steering.load(session)
    await agent.run(None, message_history=nxt.history, capabilities=[nxt])
    assert script.views()[-1] == view(rebuilt)


async def test_a_token_limit_crossed_by_the_answer_keeps_the_answer_stored() -> None:
    session = Session("s", MemoryStore())
    agent = Agent(Script(say("a long answer")).model)
    steering = await Steering.load(session)
    with pytest.raises(UsageLimitExceeded, match="total_tokens_limit"):
        await agent.run(
            "go", capabilities=[steering], usage_limits=UsageLimits(total_tokens_limit=1)
        )
    # Pydantic AI checks tokens once the response is in: the run fails, its answer is stored
    assert view(history(await session.messages())) == ["user:go", "say:a long answer"]
