"""One compiled graph serves every session: ``SteeringMiddleware(store)`` takes each run's
session from its thread (``config["configurable"]["thread_id"]``), on SQLite and Postgres.

Runs on two threads at once through one graph each store into their own session and take
their own steers; two runs on one thread still are one at a time (the older is refused).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware.types import InputAgentState
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import StructuredTool
from langgraph.config import get_config

from steerable.errors import TranscriptConflict, UsageError
from steerable.integrations.langgraph import SteerableSaver, SteeringMiddleware, from_stored
from steerable.session import Session
from steerable.store import Store
from tests.integrations.langgraph.chat import ScriptedChat, valid
from tests.integrations.langgraph.support import ids, shape, work_tool


def _on(thread: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread}}


def _prompt(text: str) -> InputAgentState:
    # the usual input: a dict, no id (LangGraph gives it one)
    return {"messages": [{"role": "user", "content": text}]}


class _Gate:
    """The first tool call of each thread waits here until ``release``; the runs begun by
    :meth:`start` are cancelled at the end of ``async with`` if still under way."""

    def __init__(self) -> None:
        self.working: dict[str, asyncio.Event] = {}
        self.release = asyncio.Event()
        self.runs: list[asyncio.Future[Any]] = []

    async def __aenter__(self) -> _Gate:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release.set()
        for run in self.runs:
            run.cancel()
        await asyncio.gather(*self.runs, return_exceptions=True)

    def start(self, agent: Any, text: str, thread: str) -> asyncio.Future[Any]:
        """``agent.ainvoke`` of the prompt ``text`` on ``thread``, as a task."""
        run: asyncio.Future[Any] = asyncio.ensure_future(agent.ainvoke(_prompt(text), _on(thread)))
        self.runs.append(run)
        return run

    def event(self, thread: str) -> asyncio.Event:
        return self.working.setdefault(thread, asyncio.Event())

    async def hold(self) -> None:
        thread = str(get_config()["configurable"]["thread_id"])
        if not self.event(thread).is_set():
            self.event(thread).set()
            await self.release.wait()

    async def reached(self, thread: str, run: asyncio.Future[Any]) -> None:
        """Wait until ``run`` (on ``thread``) waits in its tool; raise if it ended first."""
        waiting = asyncio.ensure_future(self.event(thread).wait())
        await asyncio.wait((waiting, run), timeout=30, return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        if run.done():
            run.result()  # its error, if it failed
            pytest.fail(f"the run on {thread!r} ended before its tool call")
        assert self.event(thread).is_set(), f"the run on {thread!r} never reached its tool"


async def test_two_threads_at_once_through_one_graph_each_store_into_their_own_session(
    any_store: Store,
) -> None:
    model = ScriptedChat(rounds=2)
    async with _Gate() as gate:
        agent = create_agent(
            model, [work_tool(gate.hold)], middleware=[SteeringMiddleware(any_store)]
        )
        alice = gate.start(agent, "plan my week", "alice")
        bob = gate.start(agent, "book a table", "bob")
        await gate.reached("alice", alice)
        await gate.reached("bob", bob)
        await Session("alice", any_store).steer("skip friday", id="ka")
        await Session("bob", any_store).steer("for two", id="kb")
        gate.release.set()
        done = await asyncio.gather(alice, bob)
    stored = {s: await Session(s, any_store).messages() for s in ("alice", "bob")}

    assert [d["messages"][-1].text for d in done] == [
        "answered: plan my week | skip friday",
        "answered: book a table | for two",
    ]
    for session, prompt, steer in (
        ("alice", "plan my week", "skip friday"),
        ("bob", "book a table", "for two"),
    ):
        assert shape(stored[session]) == [
            *(f"user:{prompt}", "ai", "tool", f"steer:{steer}"),
            *("ai", "tool", "ai"),
        ]
        assert valid(from_stored(stored[session]))
    # each run's state is its session's transcript, and no request mixed the two
    assert [ids(d["messages"]) for d in done] == [[m.id for m in stored[s]] for s in stored]
    for request in model.requests:
        texts = {m.text for m in request if isinstance(m, HumanMessage)}
        assert not ({"plan my week", "skip friday"} & texts and {"book a table", "for two"} & texts)


async def test_a_second_run_on_a_thread_takes_it_over_and_a_run_on_another_goes_on(
    any_store: Store,
) -> None:
    async with _Gate() as gate:
        agent = create_agent(
            ScriptedChat(rounds=1),
            [work_tool(gate.hold)],
            middleware=[SteeringMiddleware(any_store)],
        )
        first = gate.start(agent, "one", "t")
        other = gate.start(agent, "elsewhere", "u")
        await gate.reached("t", first)
        await gate.reached("u", other)
        second = await agent.ainvoke(_prompt("two"), _on("t"))  # its tool call does not wait
        gate.release.set()
        with pytest.raises(UsageError, match="another run on session 't'"):
            await first
        elsewhere = await other
    on_t = await Session("t", any_store).messages()
    on_u = await Session("u", any_store).messages()
    assert second["messages"][-1].text == "answered: two"
    assert elsewhere["messages"][-1].text == "answered: elsewhere"
    # the first run's prompt was stored at its first step; nothing of it after the takeover
    assert shape(on_t) == ["user:one", "user:two", "ai", "tool", "ai"]
    assert shape(on_u) == ["user:elsewhere", "ai", "tool", "ai"]


async def test_a_run_without_a_thread_id_is_refused_and_stores_nothing(any_store: Store) -> None:
    agent = create_agent(
        ScriptedChat(rounds=1), [work_tool()], middleware=[SteeringMiddleware(any_store)]
    )
    with pytest.raises(UsageError, match="thread_id"):
        await agent.ainvoke(_prompt("hi"))
    assert await any_store.messages("None") == []


def test_a_middleware_over_something_else_is_a_usage_error_naming_both_ways() -> None:
    with pytest.raises(UsageError, match=r"Store .*thread_id.* or a Session"):
        SteeringMiddleware("alice")  # type: ignore[arg-type]


async def test_the_usual_lines_two_turns_on_a_thread_with_the_saver_and_a_steer_in_place(
    any_store: Store,
) -> None:
    # what docs/integrations.md opens the LangGraph section with
    steered: list[str] = []

    async def steer_once() -> None:
        if not steered:
            steered.append("k")
            await Session("day-1", any_store).steer("and book lunch", id="k")

    agent = create_agent(
        ScriptedChat(rounds=1),
        [work_tool(steer_once)],
        middleware=[SteeringMiddleware(any_store)],
        checkpointer=SteerableSaver(any_store),
    )
    config = _on("day-1")
    first = await agent.ainvoke(_prompt("Plan my day"), config)
    second = await agent.ainvoke(_prompt("And tomorrow?"), config)  # the checkpoint's history
    again = await agent.ainvoke(None, config)  # the retry: a finished thread stays as it is
    stored = await Session("day-1", any_store).messages()
    assert first["messages"][-1].text == "answered: Plan my day | and book lunch"
    assert second["messages"][-1].text == "answered: And tomorrow?"
    assert ids(again["messages"]) == ids(second["messages"]) == [m.id for m in stored]
    assert shape(stored) == [
        *("user:Plan my day", "ai", "tool", "steer:and book lunch", "ai"),
        *("user:And tomorrow?", "ai", "tool", "ai"),
    ]


@pytest.mark.parametrize("own_thread", [False, True], ids=["parent-s-thread", "own-thread"])
async def test_an_agent_run_inside_a_tool_needs_a_thread_of_its_own(
    any_store: Store, own_thread: bool
) -> None:
    # LangChain hands a tool's runs the parent's config, thread_id included
    inner = create_agent(ScriptedChat(rounds=0), [], middleware=[SteeringMiddleware(any_store)])

    async def ask_inner() -> str:
        config = _on("day-1/inner") if own_thread else None
        state = await inner.ainvoke(_prompt("inner"), config)
        return str(state["messages"][-1].text)

    tool = StructuredTool.from_function(coroutine=ask_inner, name="work", description="Ask.")
    outer = create_agent(ScriptedChat(rounds=1), [tool], middleware=[SteeringMiddleware(any_store)])
    if not own_thread:
        with pytest.raises(TranscriptConflict, match="'day-1'"):
            await outer.ainvoke(_prompt("outer"), _on("day-1"))
        assert shape(await Session("day-1", any_store).messages()) == [
            "user:outer",
            "user:inner",
            "ai",
        ]
        return
    await outer.ainvoke(_prompt("outer"), _on("day-1"))
    assert shape(await Session("day-1", any_store).messages()) == ["user:outer", "ai", "tool", "ai"]
    assert shape(await Session("day-1/inner", any_store).messages()) == ["user:inner", "ai"]
