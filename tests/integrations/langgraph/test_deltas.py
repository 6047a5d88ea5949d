"""Live text deltas from LangGraphAgent: a turn with ``events`` streams the model's text.

Each turn is built by hand over a MemoryStore session, as the service builds one, with
``events`` a list's ``append`` (or a sink that raises).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGenerationChunk
from langgraph.constants import TAG_NOSTREAM
from langgraph.graph import START, MessagesState, StateGraph

from steerable import Session, user
from steerable.events import Event, EventSink, ToolEnded, ToolStarted
from steerable.integrations.langgraph import LangGraphAgent, from_stored
from steerable.models.base import TextDelta
from steerable.service import Turn
from steerable.service_store import Input
from steerable.stores.memory import MemoryStore
from tests.integrations.langgraph.chat import ScriptedChat, valid
from tests.integrations.langgraph.support import ids, shape, work_tool


def _turn(session: Session, events: EventSink | None, text: str = "plan my week") -> Turn:
    return Turn(
        session=session.id,
        id="p",
        prompt=Input("send", text, "p"),
        messages=[user(text, id="p")],
        store_session=session,
        resumed=False,
        steers_left=16,
        events=events,
    )


def _texts(events: list[Event]) -> list[str]:
    """The text deltas (the tool calls' events aside: test_live_tools.py has them)."""
    assert all(isinstance(e, TextDelta | ToolStarted | ToolEnded) for e in events), events
    return [e.text for e in events if isinstance(e, TextDelta)]


async def test_the_deltas_joined_are_the_answer_and_a_steer_still_lands_in_place() -> None:
    session = Session("s", MemoryStore())

    async def steer_once() -> None:
        if len(model.requests) == 1:  # during the first tool call only
            await session.steer("skip friday", id="k")

    model = ScriptedChat(rounds=2)
    events: list[Event] = []
    outcome = await LangGraphAgent(model, [work_tool(steer_once)]).run_turn(
        _turn(session, events.append)
    )
    stored = await session.messages()
    assert outcome.state == "completed"
    assert outcome.text == "answered: plan my week | skip friday"
    deltas = _texts(events)
    assert "".join(deltas) == outcome.text and len(deltas) > 1  # it streamed, in pieces
    _, second, third = model.requests
    assert ids(second)[-1] == "k" and second[-2].type == "tool" and ids(third).count("k") == 1
    assert shape(stored) == [
        *("user:plan my week", "ai", "tool", "steer:skip friday"),
        *("ai", "tool", "ai"),
    ]
    assert valid(from_stored(stored))


async def test_a_sink_that_raises_does_not_fail_the_turn(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[Event] = []

    def broken(event: Event) -> None:
        calls.append(event)
        raise RuntimeError("the client went away")

    session = Session("s", MemoryStore())
    with caplog.at_level(logging.ERROR, "steerable.integrations.langgraph"):
        outcome = await LangGraphAgent(ScriptedChat(rounds=1), [work_tool()]).run_turn(
            _turn(session, broken)
        )
    assert (outcome.state, outcome.text) == ("completed", "answered: plan my week")
    assert len(calls) == 1  # the first failure ends the events, not the turn
    assert "the live event sink failed" in caplog.text
    assert shape(await session.messages()) == ["user:plan my week", "ai", "tool", "ai"]


async def test_a_model_that_cannot_stream_sends_its_reply_whole() -> None:
    model = ScriptedChat(rounds=1, disable_streaming=True)
    events: list[Event] = []
    outcome = await LangGraphAgent(model, [work_tool()]).run_turn(
        _turn(Session("s", MemoryStore()), events.append)
    )
    assert _texts(events) == ["answered: plan my week"] == [outcome.text]


async def test_a_graph_streams_its_model_calls_not_nostream_nor_a_subgraph_s() -> None:
    model = ScriptedChat(rounds=0)

    async def aside(state: MessagesState) -> dict[str, Any]:
        note = await model.with_config(tags=[TAG_NOSTREAM]).ainvoke(state["messages"])
        assert isinstance(note, AIMessage)
        await inner.ainvoke({"messages": state["messages"]})  # a subgraph's model call
        return {}

    async def answer(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    sub = StateGraph(MessagesState)
    sub.add_node("answer", answer)
    sub.add_edge(START, "answer")
    inner = sub.compile()
    graph = StateGraph(MessagesState)
    graph.add_node("aside", aside)
    graph.add_node("answer", answer)
    graph.add_edge(START, "aside")
    graph.add_edge("aside", "answer")
    events: list[Event] = []
    outcome = await LangGraphAgent(graph=graph.compile()).run_turn(
        _turn(Session("s", MemoryStore()), events.append, "one")
    )
    assert len(model.requests) == 3
    assert "".join(_texts(events)) == outcome.text == "answered: one"


class _MustNotStream(ScriptedChat):
    async def _astream(self, *args: Any, **kwargs: Any) -> AsyncIterator[ChatGenerationChunk]:
        raise AssertionError("a turn with no sink streamed")
        yield  # type: ignore[unreachable]  # an async generator, as the one it replaces


async def test_a_turn_with_no_sink_does_not_stream() -> None:
    outcome = await LangGraphAgent(_MustNotStream(rounds=1), [work_tool()]).run_turn(
        _turn(Session("s", MemoryStore()), None)
    )
    assert (outcome.state, outcome.text) == ("completed", "answered: plan my week")
