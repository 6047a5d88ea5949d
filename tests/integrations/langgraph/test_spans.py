"""A LangGraph turn's spans under the service: LangChain makes none, so the middleware makes
a ``chat`` span per model call and an ``execute_tool`` span per tool call, children of the
turn's ``invoke_agent`` span, with the session as ``gen_ai.conversation.id``.

The turns run in a :class:`Service` over a MemoryStore, through the SDK's in-memory exporter
(the ``spans`` fixture); the model is :class:`ScriptedChat` calling ``weather`` once, then
answering (as in ``test_live_tools``).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import StructuredTool, ToolException
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from steerable.integrations.langgraph import LangGraphAgent
from steerable.service import Service
from steerable.stores.memory import MemoryStore
from tests.integrations.langgraph.chat import ScriptedChat, turn_part
from tests.telemetry.conftest import spans  # noqa: F401


class _WeatherChat(ScriptedChat):
    """Calls ``weather`` for Paris once, then answers with the tool's result."""

    async def _reply(self, messages: list[BaseMessage]) -> AIMessage:
        self.requests.append(list(messages))
        results = [m for m in turn_part(messages) if isinstance(m, ToolMessage)]
        if not results:
            call = {"name": "weather", "args": {"city": "Paris"}, "id": "c1", "type": "tool_call"}
            return AIMessage("", tool_calls=[call], id="r1")
        return AIMessage(f"it is {results[0].text}")


async def _serve(
    exporter: InMemorySpanExporter, body: Callable[[str], str], *, live: bool
) -> list[ReadableSpan]:
    """One served turn's spans (those of its trace)."""

    def weather(city: str) -> str:
        """The weather in ``city``."""
        return body(city)

    tool = StructuredTool.from_function(weather, handle_tool_error=True)
    agent = LangGraphAgent(_WeatherChat(), [tool])
    sink = (lambda s, t, e: None) if live else None
    service = Service(MemoryStore(), agent, poll=0.05, live=sink)
    async with service.serving():
        sent = await service.send("s", "weather in Paris?")
        done = await service.wait("s", sent.id, seconds=20)
    assert done is not None and done.state == "completed", done
    finished = list(exporter.get_finished_spans())
    return [s for s in finished if s.context.trace_id == _turn(finished).context.trace_id]


def _turn(found: list[ReadableSpan]) -> ReadableSpan:
    (turn,) = [s for s in found if s.name == "invoke_agent LangGraphAgent"]
    return turn


def _parent(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


@pytest.mark.parametrize("live", [False, True])
async def test_model_and_tool_calls_are_spans_under_the_turn_s_span(
    spans: InMemorySpanExporter,  # noqa: F811
    live: bool,
) -> None:
    found = await _serve(spans, lambda city: f"sunny in {city}", live=live)
    turn = _turn(found)
    chats = sorted(
        [s for s in found if s.name.startswith("chat ")], key=lambda s: s.start_time or 0
    )
    tools = [s for s in found if s.name.startswith("execute_tool ")]
    assert [s.name for s in chats] == ["chat scripted-chat"] * 2
    assert [s.name for s in tools] == ["execute_tool weather"]
    for span in [*chats, *tools]:
        assert _parent(span) == turn.context.span_id
        assert span.attributes is not None
        assert span.attributes["gen_ai.conversation.id"] == "s"
    first = chats[0].attributes
    assert first is not None
    assert first["gen_ai.operation.name"] == "chat"
    assert first["gen_ai.provider.name"] == "_weather"  # LangChain's: the class name
    assert first["gen_ai.request.model"] == "scripted-chat"
    assert chats[0].kind == trace.SpanKind.CLIENT
    (tool,) = tools
    assert tool.attributes is not None
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool.attributes["gen_ai.tool.name"] == "weather"
    assert tool.attributes["gen_ai.tool.call.id"] == "c1"
    assert "gen_ai.tool.call.arguments" not in tool.attributes  # no content unless asked
    assert tool.status.status_code == trace.StatusCode.UNSET
    # the tool ran between the two model calls
    assert (chats[0].end_time or 0) <= (tool.start_time or 0)
    assert (tool.end_time or 0) <= (chats[1].start_time or 0)


async def test_a_failed_tool_call_s_span_says_so_and_carries_content_when_asked(
    spans: InMemorySpanExporter,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")

    def fail(city: str) -> str:
        raise ToolException(f"no weather for {city}")

    found = await _serve(spans, fail, live=True)
    (tool,) = [s for s in found if s.name == "execute_tool weather"]
    assert tool.status.status_code == trace.StatusCode.ERROR
    assert tool.attributes is not None
    assert tool.attributes["error.type"] == "tool_error"
    assert tool.attributes["gen_ai.tool.call.arguments"] == '{"city": "Paris"}'
    assert tool.attributes["gen_ai.tool.call.result"] == "no weather for Paris"
