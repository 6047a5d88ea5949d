"""Live tool events from LangGraphAgent under the service: each tool call of a turn with a
live sink is a ToolStarted, then a ToolEnded with the result the model reads.

The turns run in a :class:`Service` over a MemoryStore with ``live=`` a list's append; the
model is :class:`ScriptedChat` calling the tool ``weather`` once (call ``c1``, in the reply
``r1``), then answering.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool, ToolException

from steerable.events import Event, TextDelta, ToolEnded, ToolStarted
from steerable.integrations.langgraph import LangGraphAgent, journaled
from steerable.journal import call_key
from steerable.messages import ToolCall, ToolResult
from steerable.service import Service
from steerable.session import Session
from steerable.stores.memory import MemoryStore
from tests.integrations.langgraph.chat import ScriptedChat, turn_part

CALL = ToolCall("c1", "weather", '{"city": "Paris"}')
Seen = list[tuple[str, str, Event]]


class _WeatherChat(ScriptedChat):
    """Calls ``weather`` for Paris once, then answers with the tool's result."""

    async def _reply(self, messages: list[BaseMessage]) -> AIMessage:
        self.requests.append(list(messages))
        results = [m for m in turn_part(messages) if isinstance(m, ToolMessage)]
        if not results:
            call = {"name": "weather", "args": {"city": "Paris"}, "id": "c1", "type": "tool_call"}
            return AIMessage("", tool_calls=[call], id="r1")
        return AIMessage(f"it is {results[0].text}")


def _weather(body: Callable[[str], str]) -> BaseTool:
    def weather(city: str) -> str:
        """The weather in ``city``."""
        return body(city)

    return StructuredTool.from_function(weather, handle_tool_error=True)


async def _serve(
    store: MemoryStore, tool: BaseTool | Any, seen: Seen, *, stream: bool = True
) -> tuple[str, str, str]:
    """Send one turn through a service with a live sink; its id, state and text."""
    agent = LangGraphAgent(_WeatherChat(disable_streaming=not stream), [tool])
    service = Service(store, agent, poll=0.05, live=lambda s, t, e: seen.append((s, t, e)))
    async with service.serving():
        sent = await service.send("s", "weather in Paris?")
        done = await service.wait("s", sent.id, seconds=20)
    assert done is not None
    assert {(s, t) for s, t, _ in seen} <= {("s", sent.id)}
    return sent.id, done.state, done.text


def _tools(seen: Seen) -> list[Event]:
    return [e for _, _, e in seen if isinstance(e, ToolStarted | ToolEnded)]


async def test_a_tool_call_is_started_then_ended_with_its_result_before_the_answer() -> None:
    seen: Seen = []
    _, state, text = await _serve(MemoryStore(), _weather(lambda city: f"sunny in {city}"), seen)
    assert (state, text) == ("completed", "it is sunny in Paris")
    assert _tools(seen) == [
        ToolStarted(CALL),
        ToolEnded(CALL, ToolResult("c1", "weather", "sunny in Paris")),
    ]
    # the call's events come before the answer's text
    kinds = [type(e).__name__ for _, _, e in seen]
    assert kinds[:2] == ["ToolStarted", "ToolEnded"] and set(kinds[2:]) == {"TextDelta"}
    assert "".join(e.text for _, _, e in seen if isinstance(e, TextDelta)) == text


async def test_a_failing_tool_ends_with_an_error_the_model_reads() -> None:
    def fail(city: str) -> str:
        raise ToolException(f"no weather for {city}")

    seen: Seen = []
    _, state, text = await _serve(MemoryStore(), _weather(fail), seen)
    assert (state, text) == ("completed", "it is no weather for Paris")
    assert _tools(seen) == [
        ToolStarted(CALL),
        ToolEnded(CALL, ToolResult("c1", "weather", "no weather for Paris", is_error=True)),
    ]


@pytest.mark.parametrize("recorded", [False, True])
async def test_a_journaled_call_answered_by_the_journal_is_a_replayed_end(recorded: bool) -> None:
    store = MemoryStore()
    ran: list[str] = []

    @journaled
    async def weather(city: str) -> str:
        """The weather in ``city``."""
        ran.append(city)
        return f"sunny in {city}"

    if recorded:  # an earlier run of this call recorded its result
        key = call_key("s", "langgraph/r1", "c1")
        session = Session("s", store)
        await session.begin_calls([key])
        await session.end_call(key, ToolResult("c1", "weather", "foggy in Paris"))
    seen: Seen = []
    tool = StructuredTool.from_function(coroutine=weather)
    # not streamed: a streamed reply's id is langchain's run id, not the model's "r1"
    _, state, text = await _serve(store, tool, seen, stream=False)
    assert state == "completed"
    if recorded:
        assert (ran, text) == ([], "it is foggy in Paris")
        assert _tools(seen) == [
            ToolEnded(CALL, ToolResult("c1", "weather", "foggy in Paris"), replayed=True)
        ]
    else:
        assert (ran, text) == (["Paris"], "it is sunny in Paris")
        assert _tools(seen) == [
            ToolStarted(CALL),
            ToolEnded(CALL, ToolResult("c1", "weather", "sunny in Paris")),
        ]


async def test_no_sink_no_tool_events_and_the_tool_still_runs() -> None:
    agent = LangGraphAgent(_WeatherChat(), [_weather(lambda city: f"sunny in {city}")])
    service = Service(MemoryStore(), agent, poll=0.05)
    async with service.serving():
        sent = await service.send("s", "weather in Paris?")
        done = await service.wait("s", sent.id, seconds=20)
    assert done is not None and (done.state, done.text) == ("completed", "it is sunny in Paris")


async def test_a_tool_that_raises_ends_with_its_error_and_the_turn_fails() -> None:
    # The end is sent before the error goes up (the turn fails: nothing handles it). This
    # test hung one run in twenty until the replica's waits were made to end on a
    # cancellation (tests/service/test_waited.py).
    def weather(city: str) -> str:
        """The weather in ``city``."""
        raise RuntimeError("no weather")

    seen: Seen = []
    _, state, _ = await _serve(MemoryStore(), StructuredTool.from_function(weather), seen)
    assert state == "failed"
    events = _tools(seen)
    assert events[0] == ToolStarted(CALL)
    assert isinstance(events[1], ToolEnded) and events[1].result.is_error
    assert "RuntimeError: no weather" in events[1].result.content
