"""Steering given once to the Agent: each run steers the session its conversation_id names,
from what is stored; Pydantic AI's ConversationStore way of running composes with it."""

from __future__ import annotations

import pytest
from pydantic import BaseModel
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.agent import WrapperAgent
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import InMemoryConversationStore
from pydantic_ai.messages import ModelResponse, ToolCallPart

from steerable import Session, Store, UsageError, transcript_problems
from steerable.integrations.pydantic_ai import (
    PydanticAIAgent,
    SteerableConversationStore,
    Steering,
    history,
)
from steerable.service import Service
from steerable.stores.memory import MemoryStore
from tests.integrations.pydantic_ai.support import Script, call, problems, say, view


def _agent(store: Store, script: Script, session: str = "c1") -> Agent[None, str]:
    """An agent with Steering(store); its tool leaves a steer in ``session``."""
    agent = Agent(script.model, capabilities=[Steering(store)])

    @agent.tool_plain
    async def work() -> str:
        """Some work."""
        await Session(session, store).steer("use the cache", id="st-1")
        return "worked"

    return agent


async def test_an_agents_steering_steers_each_run_on_its_conversation_id(store: Store) -> None:
    script = Script(call("work", "w1"), say("done"), say("again done"), say("other"))
    agent = _agent(store, script)
    first = await agent.run("go", conversation_id="c1")
    assert first.output == "done"
    assert script.views()[1] == ["user:go", "call:w1", "return:w1", "user:use the cache"]
    stored = await Session("c1", store).messages()
    assert [(m.steered, m.text) for m in stored if m.text] == [
        (False, "go"),
        (True, "use the cache"),
        (False, "done"),
    ]
    # the next run on c1 starts from what is stored: no message_history passed
    await agent.run("again", conversation_id="c1")
    assert script.views()[2] == [*view(history(stored)), "user:again"]
    # another conversation is another session
    await agent.run("elsewhere", conversation_id="c2")
    assert script.views()[3] == ["user:elsewhere"]
    again = await Session("c1", store).messages()
    assert again[: len(stored)] == stored and [m.text for m in again[len(stored) :]] == [
        "again",
        "again done",
    ]
    assert problems(history(again)) == [] and transcript_problems(again) == []


async def test_saving_a_steered_run_the_pydantic_ai_way_adds_nothing(store: Store) -> None:
    conversations = SteerableConversationStore(store)
    script = Script(call("work", "w1"), say("done"), say("again done"))
    agent = _agent(store, script, session="c")
    conversation = await conversations.load("c") or Conversation(conversation_id="c")
    result = await agent.run("go", conversation=conversation)
    assert await conversations.save(result) == []  # Steering stored it, step by step
    loaded = await conversations.load("c")
    assert loaded is not None and loaded.revision == result.conversation.revision
    assert loaded.usage.requests == 2
    second = await agent.run("again", conversation=loaded)
    assert script.views()[-1] == [*view(loaded.messages), "user:again"]
    assert await conversations.save(second) == []
    stored = await Session("c", store).messages()
    assert [m.text for m in stored if m.text] == [
        "go",
        "use the cache",
        "done",
        "again",
        "again done",
    ]
    assert [m.id for m in stored if m.steered] == ["st-1"]
    assert transcript_problems(stored) == []


class _Answer(BaseModel):
    x: int


def _retrying_agent() -> Agent[None, _Answer]:
    """A call that is retried once, a plain call, then the output tool."""
    final = ModelResponse(parts=[ToolCallPart("final_result", '{"x":1}', tool_call_id="f")])
    script = Script(call("flaky", "a"), call("flaky", "b"), call("plain", "p"), final)
    agent = Agent(script.model, output_type=_Answer)
    tries: list[int] = []

    @agent.tool_plain
    def flaky() -> str:
        """Fails once."""
        tries.append(1)
        if len(tries) == 1:
            raise ModelRetry("again")
        return "fine"

    @agent.tool_plain
    def plain() -> str:
        """Works."""
        return "ok"

    return agent


async def test_usage_counts_the_tool_calls_pydantic_ai_counts(store: Store) -> None:
    """A retried call and an output tool's return are no tool call (InMemory says 2, not 4)."""
    loaded = []
    for conversations in (InMemoryConversationStore(), SteerableConversationStore(store)):
        agent = _retrying_agent()
        result = await agent.run("hi", conversation=Conversation(conversation_id="u"))
        await conversations.save(result)
        found = await conversations.load("u")
        assert found is not None
        loaded.append((result.usage.tool_calls, found.usage.tool_calls, found.usage.requests))
    assert loaded == [(2, 2, 4), (2, 2, 4)]


async def test_a_run_with_two_steerings_is_refused_and_stores_nothing() -> None:
    store = MemoryStore()
    agent = Agent(Script(say("never")).model, capabilities=[Steering(store)])
    with pytest.raises(UsageError, match="one Steering"):
        await agent.run("go", conversation_id="s", capabilities=[Steering(Session("s", store))])
    assert await Session("s", store).messages() == []


def test_an_agents_steering_takes_a_store_and_no_run_of_its_own() -> None:
    store = MemoryStore()
    with pytest.raises(UsageError, match="Store or Session"):
        Steering("s")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="one run's"):
        Steering(store, prompt_id="p")
    with pytest.raises(UsageError, match="each run has its own"):
        _ = Steering(store).steps
    assert Steering(store).taken == []


@pytest.mark.parametrize("wrapped", [False, True], ids=["agent", "wrapper"])
async def test_under_the_service_an_agents_steering_stands_aside_for_the_turns(
    wrapped: bool,
) -> None:
    store = MemoryStore()
    agent = Agent(Script(say("hello")).model, capabilities=[Steering(store)])
    served = WrapperAgent(agent) if wrapped else agent  # a durable wrapper, say
    service = Service(store, PydanticAIAgent(served), poll=0.05)
    async with service.serving():
        sent = await service.send("s", "hi")
        done = await service.wait("s", sent.id, seconds=10)
    assert done is not None and done.state == "completed"
    stored = await Session("s", store).messages()
    assert [(m.id, m.text) for m in stored] == [(sent.id, "hi"), (stored[1].id, "hello")]
