"""SteeringMiddleware in a real ``create_agent`` graph: steers at the graph's own step.

The model is :class:`ScriptedChat` (records each request); the store a SQLite file that a
child process steers through, as another program would; the graph's state is read from
its own checkpointer.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, SummarizationMiddleware
from langchain.agents.middleware.types import InputAgentState
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph.message import add_messages
from langgraph.runtime import Runtime

from steerable.errors import UsageError
from steerable.integrations.langgraph import SteeringMiddleware, from_stored, to_stored
from steerable.session import Session
from steerable.stores.sqlite import SQLiteStore
from tests.integrations.langgraph.chat import ScriptedChat, valid
from tests.integrations.langgraph.support import ids, shape, steer_from_another_process, work_tool

CONFIG: RunnableConfig = {"configurable": {"thread_id": "t"}}


def _prompt(text: str, id: str) -> InputAgentState:
    return {"messages": [HumanMessage(text, id=id)]}


async def test_a_steer_from_another_process_during_a_tool_call_joins_the_next_request_in_place(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    sent: list[str] = []

    async def steer_once() -> None:
        if not sent:
            sent.append("k")
            await steer_from_another_process(path, "s", "skip friday", "k")

    async with SQLiteStore(path) as store:
        session = Session("s", store)
        model = ScriptedChat(rounds=2)
        agent = create_agent(
            model,
            [work_tool(steer_once)],
            middleware=[SteeringMiddleware(session)],
            checkpointer=InMemorySaver(),
        )
        state = await agent.ainvoke(_prompt("plan my week", "p"), CONFIG)
        stored = await session.messages()
        checkpoint = (await agent.aget_state(CONFIG)).values["messages"]

    first, second, third = model.requests  # one run: three requests, none asked again
    assert ids(first) == ["p"]
    # the very next request: after the tool's result, once
    assert isinstance(second[-2], ToolMessage) and ids(second)[-1] == "k"
    assert isinstance(second[-1], HumanMessage) and second[-1].text == "skip friday"
    # in place in the later request: where it was taken, the run carried on (same reply ids)
    assert ids(third)[: len(second)] == ids(second) and ids(third).count("k") == 1
    assert all(valid(request) for request in model.requests)
    # in the graph's state and its checkpoint, once, in the same place
    assert ids(state["messages"]) == ids(checkpoint) and ids(checkpoint).count("k") == 1
    assert ids(checkpoint)[: len(second)] == ids(second)
    assert state["messages"][-1].text == "answered: plan my week | skip friday"
    # and in the steerable transcript: the prompt and the steer as ours, the rest verbatim
    assert shape(stored) == [
        "user:plan my week",
        "ai",
        "tool",
        "steer:skip friday",
        "ai",
        "tool",
        "ai",
    ]
    assert [m.id for m in stored] == ids(checkpoint)
    assert next(m for m in stored if m.id == "k").steered


async def test_a_steer_during_the_final_answer_waits_for_the_next_run(tmp_path: Path) -> None:
    path = tmp_path / "s.db"

    async def too_late(messages: list[BaseMessage]) -> None:
        if not any(m.id == "later" for m in messages):
            await steer_from_another_process(path, "s", "too late", "late")

    async with SQLiteStore(path) as store:
        session = Session("s", store)
        model = ScriptedChat(rounds=1, on_answer=too_late)
        agent = create_agent(
            model,
            [work_tool()],
            middleware=[SteeringMiddleware(session)],
            checkpointer=InMemorySaver(),
        )
        first = await agent.ainvoke(_prompt("plan my week", "p"), CONFIG)
        waiting = [s.id for s in await session.steers()]
        after_first = shape(await session.messages())
        await agent.ainvoke(_prompt("and next week", "later"), CONFIG)
        stored = await session.messages()

    assert first["messages"][-1].text == "answered: plan my week"
    assert waiting == ["late"]
    assert after_first == ["user:plan my week", "ai", "tool", "ai"]
    asked = [ids(r) for r in model.requests]
    assert [r.count("late") for r in asked] == [0, 0, 1, 1]
    # taken by the next run's first step: after its prompt, before its first request
    assert asked[2][-2:] == ["later", "late"]
    assert shape(stored)[4:] == ["user:and next week", "steer:too late", "ai", "tool", "ai"]
    assert model.requests[-1][-1].text == "worked"
    final = model.requests[-1]
    assert isinstance(final[-2], AIMessage) and valid(final)


async def test_a_step_the_graph_ran_again_after_a_lost_checkpoint_is_replaced_by_the_stored_one(
    tmp_path: Path,
) -> None:
    # The store has a step (a reply, its tool result, a steer taken) the checkpoint lost;
    # the graph ran it again, so its reply and result carry new ids: the store wins.
    call = {"name": "work", "args": {}, "id": "call-1", "type": "tool_call"}
    prompt = HumanMessage("plan my week", id="p")
    ran = [AIMessage("", tool_calls=[call], id="a1"), ToolMessage("worked", tool_call_id="call-1")]
    ran[1].id = "t1"
    again = [
        AIMessage("", tool_calls=[call], id="a2"),
        ToolMessage("worked", tool_call_id="call-1"),
    ]
    again[1].id = "t2"
    async with SQLiteStore(tmp_path / "s.db") as store:
        session = Session("s", store)
        await session.steer("skip friday", id="k")
        await session.save([to_stored(m) for m in [prompt, *ran]], take=1)
        steering = SteeringMiddleware(Session("s", store))
        state: Any = {"messages": [prompt, *again]}
        update = await steering.abefore_model(state, Runtime())
        stored = await session.messages()
    assert update is not None
    merged: Any = add_messages(state["messages"], update["messages"])
    assert ids(merged) == ["p", "a1", "t1", "k"] == [m.id for m in stored]
    assert valid(merged)


async def test_a_sync_invoke_is_refused_with_our_usage_error(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "s.db") as store:
        middleware = SteeringMiddleware(Session("s", store))
        agent = create_agent(ScriptedChat(), [work_tool()], middleware=[middleware])
        with pytest.raises(UsageError, match="ainvoke"):
            agent.invoke(_prompt("hi", "p"))
        assert await store.messages("s") == []


def test_a_tool_artifact_that_is_not_json_is_kept_as_its_str() -> None:
    message = ToolMessage("done", tool_call_id="c", artifact=Path("out.bin"), id="t")
    (back,) = from_stored([to_stored(message)])
    assert isinstance(back, ToolMessage) and back.id == "t" and back.content == "done"
    assert back.artifact == "out.bin"


async def test_a_run_begun_while_another_runs_takes_over_and_the_other_stores_no_more(
    tmp_path: Path,
) -> None:
    # Two ainvoke through one middleware: the first waits in its tool while the second
    # runs to its end; the first then fails at its next step, storing nothing more.
    working, release = asyncio.Event(), asyncio.Event()

    async def first_call_waits() -> None:
        if not working.is_set():
            working.set()
            await release.wait()

    async with SQLiteStore(tmp_path / "s.db") as store:
        session = Session("s", store)
        agent = create_agent(
            ScriptedChat(rounds=1),
            [work_tool(first_call_waits)],
            middleware=[SteeringMiddleware(session)],
        )
        first = asyncio.ensure_future(agent.ainvoke(_prompt("one", "p1")))
        await asyncio.wait_for(working.wait(), 30)
        second = await agent.ainvoke(_prompt("two", "p2"))
        release.set()
        with pytest.raises(UsageError, match="one run of a session at a time"):
            await first
        stored = await session.messages()
    assert second["messages"][-1].text == "answered: two"
    # the first run's prompt was stored at its first step; nothing of it after the takeover
    assert shape(stored) == ["user:one", "user:two", "ai", "tool", "ai"]
    assert valid(from_stored(stored))


def test_a_human_message_with_more_than_text_is_kept_verbatim() -> None:
    plain = HumanMessage("plan my week", id="p")
    marked = HumanMessage("a summary", id="s", additional_kwargs={"lc_source": "summarization"})
    named = HumanMessage("hi", id="n", name="alice")
    assert shape([to_stored(plain)]) == ["user:plan my week"]
    assert shape([to_stored(m) for m in (marked, named)]) == ["human", "human"]
    back = from_stored([to_stored(m) for m in (plain, marked, named)])
    assert back == [plain, marked, named]


async def test_a_summary_of_summarization_middleware_is_stored_as_langchain_s_not_an_input(
    tmp_path: Path,
) -> None:
    summarize: AgentMiddleware[Any, Any, Any] = SummarizationMiddleware(
        ScriptedChat(rounds=0), trigger=("messages", 3), keep=("messages", 2)
    )
    async with SQLiteStore(tmp_path / "s.db") as store:
        session = Session("s", store)
        agent = create_agent(
            ScriptedChat(rounds=1),
            [work_tool()],
            middleware=[summarize, SteeringMiddleware(session)],
        )
        await agent.ainvoke(_prompt("plan my week", "p"))
        stored = await session.messages()
    summaries = [m for m in from_stored(stored) if m.additional_kwargs.get("lc_source")]
    assert len(summaries) == 1 and summaries[0].text.startswith("Here is a summary")
    # the store only appends: the prompt the summary replaced in the graph's state is kept,
    # and the summary is stored where the state has it, before the messages it kept
    assert shape(stored) == ["user:plan my week", "human", "ai", "tool", "ai"]
