"""LangGraphAgent under the service (one process, a SQLite store with the service's tables).

One graph serves every session's turns; a steer during a tool call joins the turn at its
next step; one during the final answer, or
any steer to a ``graph=`` agent (which has no step of ours), is a turn of its own; a turn
that reaches its recursion limit ends ``max_steps`` with a transcript a provider accepts.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.messages import BaseMessage
from langgraph.config import get_config
from langgraph.graph import START, MessagesState, StateGraph

from steerable.integrations.langgraph import LangGraphAgent, from_stored
from steerable.messages import Message
from steerable.service import Service
from steerable.service_store import END_STATES, ServiceStore, TurnView
from steerable.store import Store
from steerable.stores.sqlite import SQLiteStore
from tests.integrations.langgraph.chat import ScriptedChat, valid
from tests.integrations.langgraph.support import ids, shape, work_tool


async def _transcript(service: Service, session: str) -> list[Message]:
    return [e.message for e in await service.transcript(session, limit=1000)]


async def _started(service: Service, session: str) -> list[str | None]:
    events = await service.events(session, after=0, limit=1000)
    return [e.turn for e in events if e.kind == "turn_started"]


async def _turn(service: Service, session: str, id: str) -> TurnView | None:
    """The turn of input ``id`` once it ended (it is a turn once the one before it ended)."""
    for _ in range(600):
        done = await service.wait(session, id, seconds=5)
        if done is not None and done.state in END_STATES:
            return done
        await asyncio.sleep(0.05)
    return None


async def test_a_steer_during_a_tool_call_joins_the_turn_at_its_next_step(tmp_path: Path) -> None:
    working, release = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        working.set()
        await release.wait()

    model = ScriptedChat(rounds=2)
    agent = LangGraphAgent(model, [work_tool(hold)])
    async with SQLiteStore(tmp_path / "s.db") as store:
        service = Service(store, agent, poll=0.05)
        async with service.serving():
            sent = await service.send("s", "plan my week", id="p")
            await asyncio.wait_for(working.wait(), 30)
            steer = await service.steer("s", "skip friday", id="k")
            release.set()
            done = await service.wait("s", sent.id, seconds=30)
            fate = await service.input("s", "k")
            stored = await _transcript(service, "s")
    assert steer.turn == "p" and done is not None and done.state == "completed"
    assert done.text == "answered: plan my week | skip friday"
    assert fate is not None and (fate.state, fate.turn) == ("taken", "p")
    _, second, third = model.requests
    assert ids(second)[-1] == "k" and second[-2].type == "tool" and ids(third).count("k") == 1
    assert ids(third)[: len(second)] == ids(second)
    assert shape(stored) == [
        *("user:plan my week", "ai", "tool", "steer:skip friday"),
        *("ai", "tool", "ai"),
    ]
    assert valid(from_stored(stored))


async def test_a_steer_during_the_final_answer_is_a_turn_of_its_own(tmp_path: Path) -> None:
    answering, gate = asyncio.Event(), asyncio.Event()

    async def slow(messages: list[BaseMessage]) -> None:
        if not gate.is_set():
            answering.set()
            await gate.wait()

    model = ScriptedChat(rounds=1, on_answer=slow)
    async with SQLiteStore(tmp_path / "s.db") as store:
        service = Service(store, LangGraphAgent(model, [work_tool()]), poll=0.05)
        async with service.serving():
            first = await service.send("s", "one", id="one")
            await asyncio.wait_for(answering.wait(), 30)
            late = await service.steer("s", "too late", id="late")
            gate.set()
            await service.wait("s", "one", seconds=30)
            done = await _turn(service, "s", "late")
            started = await _started(service, "s")
            stored = await _transcript(service, "s")
    assert late.turn == first.id
    assert done is not None and (done.state, done.text) == ("completed", "answered: too late")
    assert started == ["one", "late"]
    asked = [ids(r) for r in model.requests]
    assert [r.count("late") for r in asked] == [0, 0, 1, 1]
    assert shape(stored) == ["user:one", "ai", "tool", "ai", "user:too late", "ai", "tool", "ai"]
    assert not next(m for m in stored if m.id == "late").steered


def _graph(model: ScriptedChat, during: Any) -> Any:
    async def work(state: MessagesState) -> dict[str, Any]:
        await during()
        return {}

    async def answer(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("work", work)
    graph.add_node("answer", answer)
    graph.add_edge(START, "work")
    graph.add_edge("work", "answer")
    return graph.compile()


async def test_a_graph_agent_takes_no_steer_each_is_a_turn_of_its_own(tmp_path: Path) -> None:
    working, release = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        if not release.is_set():
            working.set()
            await release.wait()

    model = ScriptedChat(rounds=0)
    agent = LangGraphAgent(graph=_graph(model, hold))
    assert agent.steers_per_turn == 0
    async with SQLiteStore(tmp_path / "s.db") as store:
        service = Service(store, agent, poll=0.05)
        async with service.serving():
            await service.send("s", "one", id="one")
            await asyncio.wait_for(working.wait(), 30)
            steer = await service.steer("s", "two", id="two")
            release.set()
            await service.wait("s", "one", seconds=30)
            done = await _turn(service, "s", "two")
            stored = await _transcript(service, "s")
    assert steer.turn is None  # no running turn takes it
    assert done is not None and done.text == "answered: two"
    assert ids(model.requests[0]) == ["one"]
    assert shape(stored) == ["user:one", "ai", "user:two", "ai"]


async def test_a_turn_past_its_recursion_limit_ends_max_steps_with_a_valid_transcript(
    tmp_path: Path,
) -> None:
    model = ScriptedChat(rounds=50)
    agent = LangGraphAgent(model, [work_tool()], recursion_limit=8)
    async with SQLiteStore(tmp_path / "s.db") as store:
        service = Service(store, agent, poll=0.05)
        async with service.serving():
            await service.send("s", "go on", id="go")
            done = await service.wait("s", "go", seconds=30)
            stored = await _transcript(service, "s")
    assert done is not None and done.state == "max_steps"
    assert "GraphRecursionError" in (done.error or "")
    assert shape(stored)[:3] == ["user:go on", "ai", "tool"] and shape(stored)[-1] == "tool"
    assert valid(from_stored(stored))


async def test_a_human_in_the_loop_interrupt_fails_the_turn_with_a_clear_error(
    tmp_path: Path,
) -> None:
    asks = HumanInTheLoopMiddleware(interrupt_on={"work": True})
    agent = LangGraphAgent(ScriptedChat(rounds=1), [work_tool()], middleware=[asks])
    async with SQLiteStore(tmp_path / "s.db") as store:
        # error_detail: the agent's own reason is recorded (by default, a code and a safe line)
        service = Service(store, agent, poll=0.05, error_detail=True)
        async with service.serving():
            await service.send("s", "go on", id="go")
            done = await service.wait("s", "go", seconds=30)
            stored = await _transcript(service, "s")
    assert done is not None and done.state == "failed", done
    assert "interrupt" in (done.error or "") and "HumanInTheLoopMiddleware" in (done.error or "")
    # what ran before the interrupt is stored; the call it asked about is not
    assert shape(stored) == ["user:go on"]
    assert valid(from_stored(stored))


async def test_one_graph_serves_the_turns_of_two_sessions_at_once_each_steered_in_its_own(
    any_store: Store,
) -> None:
    working = {s: asyncio.Event() for s in ("alice", "bob")}
    release = asyncio.Event()

    async def hold() -> None:
        session = str(get_config()["configurable"]["thread_id"])  # the thread is the session
        if not working[session].is_set():
            working[session].set()
            await release.wait()

    assert isinstance(any_store, ServiceStore)
    agent = LangGraphAgent(ScriptedChat(rounds=2), [work_tool(hold)])
    graph = agent.agent()
    service = Service(any_store, agent, poll=0.05)
    async with service.serving():
        await service.send("alice", "plan my week", id="pa")
        await service.send("bob", "book a table", id="pb")
        for event in working.values():
            await asyncio.wait_for(event.wait(), 30)
        await service.steer("alice", "skip friday", id="ka")
        await service.steer("bob", "for two", id="kb")
        release.set()
        done = [await service.wait(s, p, seconds=30) for s, p in (("alice", "pa"), ("bob", "pb"))]
        stored = [await _transcript(service, s) for s in ("alice", "bob")]
    assert agent.agent() is graph  # built once, for every session
    assert [d.text if d else None for d in done] == [
        "answered: plan my week | skip friday",
        "answered: book a table | for two",
    ]
    for transcript, (prompt, steer) in zip(
        stored, [("plan my week", "skip friday"), ("book a table", "for two")], strict=True
    ):
        assert shape(transcript) == [
            *(f"user:{prompt}", "ai", "tool", f"steer:{steer}"),
            *("ai", "tool", "ai"),
        ]
        assert valid(from_stored(transcript))
