"""Steering under each way of running a Pydantic AI agent, and the misuses a user meets."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from pydantic_ai import Agent
from pydantic_ai.models.test import TestModel

from steerable import Session, UsageError, transcript_problems
from steerable.integrations.pydantic_ai import Steering, history
from steerable.stores.memory import MemoryStore
from tests.integrations.pydantic_ai.support import problems, view

Run = Callable[[Agent[None, str], Steering], Awaitable[None]]


def _agent(session: Session) -> Agent[None, str]:
    """TestModel calls ``work`` once, then answers; the call leaves a steer (TestModel streams)."""
    agent = Agent(TestModel(call_tools=["work"], custom_output_text="done"))

    @agent.tool_plain
    async def work() -> str:
        """Some work."""
        await session.steer("use the cache", id="st-1")
        return "worked"

    return agent


async def _iter(agent: Agent[None, str], steering: Steering) -> None:
    async with agent.iter("go", capabilities=[steering]) as run:
        async for _ in run:
            pass


async def _stream(agent: Agent[None, str], steering: Steering) -> None:
    async with agent.run_stream("go", capabilities=[steering]) as result:
        assert [t async for t in result.stream_text(delta=True)]


async def _events(agent: Agent[None, str], steering: Steering) -> None:
    async with agent.run_stream_events("go", capabilities=[steering]) as events:
        assert [e async for e in events]


@pytest.mark.parametrize("run", [_iter, _stream, _events], ids=["iter", "run_stream", "events"])
async def test_iter_and_streaming_take_the_steer_in_place_and_store_the_answer(run: Run) -> None:
    session = Session("s", MemoryStore())
    steering = await Steering.load(session)
    await run(_agent(session), steering)
    stored = await session.messages()
    assert [(m.steered, m.text) for m in stored if m.text] == [
        (False, "go"),
        (True, "use the cache"),
        (False, "done"),
    ]
    rebuilt = view(history(stored))  # the steer right after the tool's return, once
    assert rebuilt[2].startswith("return:") and rebuilt[3:] == ["user:use the cache", "say:done"]
    assert problems(history(stored)) == [] and transcript_problems(stored) == []


async def test_a_stream_left_before_its_answer_stores_the_run_up_to_its_last_step() -> None:
    session = Session("s", MemoryStore())
    agent = _agent(session)
    steering = await Steering.load(session)
    async with agent.run_stream("go", capabilities=[steering]):
        pass  # left before the answer was read: the run ends there, unfinished
    stored = view(history(await session.messages()))
    assert stored[-2].startswith("return:") and stored[-1] == "user:use the cache"
    # the next run carries on from there: the history it is given is valid
    nxt = await Steering.load(session)
    result = await agent.run("again", message_history=nxt.history, capabilities=[nxt])
    assert result.output == "done"
    assert problems(history(await session.messages())) == []


async def test_one_steering_used_by_two_runs_at_once_refuses_the_second() -> None:
    session = Session("s", MemoryStore())
    agent = _agent(session)
    steering = await Steering.load(session)
    first, second = await asyncio.gather(
        agent.run("go", capabilities=[steering]),
        agent.run("go too", capabilities=[steering]),
        return_exceptions=True,
    )
    assert not isinstance(first, BaseException) and first.output == "done"
    assert isinstance(second, UsageError) and "serves one run" in str(second)
    stored = await session.messages()
    assert [m.text for m in stored if m.text] == ["go", "use the cache", "done"]


async def test_a_run_given_another_history_than_the_stored_one_is_refused() -> None:
    session = Session("s", MemoryStore())
    agent = _agent(session)
    await agent.run("go", capabilities=[await Steering.load(session)])
    before = await session.messages()
    elsewhere = Agent(TestModel(custom_output_text="elsewhere"))
    other = (await elsewhere.run("hello")).all_messages()  # another conversation's history
    with pytest.raises(UsageError, match="does not start from the stored transcript"):
        await agent.run("again", message_history=other, capabilities=[Steering(session)])
    assert await session.messages() == before


@pytest.mark.parametrize("loaded", [True, False], ids=["Steering.load", "Steering(session)"])
async def test_a_run_given_no_history_starts_from_the_stored_transcript(loaded: bool) -> None:
    session = Session("s", MemoryStore())
    agent = _agent(session)
    await agent.run("go", capabilities=[Steering(session)])  # a new session
    before = await session.messages()
    steering = await Steering.load(session) if loaded else Steering(session)
    result = await agent.run("again", capabilities=[steering])
    stored = await session.messages()
    assert stored[: len(before)] == before  # nothing stored again
    assert view(history(stored))[len(before) :] == ["user:again", *view(result.new_messages())[1:]]
    assert view(result.all_messages())[: len(before)] == view(history(before))  # the model saw it
