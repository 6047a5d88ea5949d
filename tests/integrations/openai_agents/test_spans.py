"""An OpenAI Agents SDK turn's spans under the service: the SDK's own tracing is not
OpenTelemetry, so the integration's run hooks make a ``chat`` span per model call and an
``execute_tool`` span per function tool call, children of the turn's ``invoke_agent`` span,
with the session as ``gen_ai.conversation.id``; a failing tool's span says so, and a model
call that fails is ended failed with the turn.
"""

from __future__ import annotations

from typing import Any

import pytest
from agents import Agent, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from steerable.integrations.openai_agents import OpenAIAgentsAgent
from steerable.service import Service
from steerable.stores.memory import MemoryStore
from tests.telemetry.conftest import spans  # noqa: F401


def _parent(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


async def _serve(
    exporter: InMemorySpanExporter, tool: Any, script: list[Any], *, live: bool
) -> tuple[str, ReadableSpan, list[ReadableSpan]]:
    """One served turn: its state, the turn's span and the rest of its trace."""
    agent = OpenAIAgentsAgent(Agent(name="a", model=ScriptedModel(script), tools=[tool]))
    sink = (lambda s, t, e: None) if live else None
    service = Service(MemoryStore(), agent, poll=0.05, live=sink)
    async with service.serving():
        await service.send("s", "plan my week", id="p")
        done = await service.wait("s", "p", seconds=30)
    assert done is not None
    found = list(exporter.get_finished_spans())
    (turn,) = [s for s in found if s.name == "invoke_agent OpenAIAgentsAgent"]
    rest = [s for s in found if s.context.trace_id == turn.context.trace_id and s is not turn]
    return done.state, turn, rest


SCRIPT = [
    [assistant_message("looking"), function_call("look", {"q": "monday"}, call_id="c1")],
    [assistant_message("done")],
]


@pytest.mark.parametrize("live", [False, True])
async def test_model_and_tool_calls_are_spans_under_the_turn_s_span(
    spans: InMemorySpanExporter,  # noqa: F811
    live: bool,
) -> None:
    @function_tool
    async def look(q: str) -> str:
        """Look something up."""
        return f"found {q}"

    state, turn, rest = await _serve(spans, look, SCRIPT, live=live)
    assert state == "completed"
    chats = sorted(
        [s for s in rest if s.name == "chat ScriptedModel"], key=lambda s: s.start_time or 0
    )
    tools = [s for s in rest if s.name == "execute_tool look"]
    assert len(chats) == 2 and len(tools) == 1
    for span in [*chats, *tools]:
        assert _parent(span) == turn.context.span_id
        assert span.attributes is not None
        assert span.attributes["gen_ai.conversation.id"] == "s"
        assert span.status.status_code == trace.StatusCode.UNSET
    first = chats[0]
    assert first.kind == trace.SpanKind.CLIENT
    assert first.attributes is not None
    assert first.attributes["gen_ai.operation.name"] == "chat"
    assert first.attributes["gen_ai.request.model"] == "ScriptedModel"
    (tool,) = tools
    assert tool.attributes is not None
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool.attributes["gen_ai.tool.call.id"] == "c1"
    assert tool.attributes["gen_ai.tool.name"] == "look"
    assert (chats[0].end_time or 0) <= (tool.start_time or 0)
    assert (tool.end_time or 0) <= (chats[1].start_time or 0)


async def test_a_failing_tool_s_span_says_so_with_content_when_asked(
    spans: InMemorySpanExporter,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")

    @function_tool
    async def look(q: str) -> str:
        """Look something up, and fail."""
        raise RuntimeError("the index is down")

    state, _, rest = await _serve(spans, look, SCRIPT, live=False)
    assert state == "completed"
    (tool,) = [s for s in rest if s.name == "execute_tool look"]
    assert tool.status.status_code == trace.StatusCode.ERROR
    assert tool.attributes is not None
    assert tool.attributes["error.type"] == "tool_error"
    assert tool.attributes["gen_ai.tool.call.arguments"] == '{"q":"monday"}'
    # the result is what the model reads: the SDK's failure message
    assert str(tool.attributes["gen_ai.tool.call.result"]).startswith("An error occurred")


async def test_a_model_call_that_fails_ends_failed(
    spans: InMemorySpanExporter,  # noqa: F811
) -> None:
    @function_tool
    async def look(q: str) -> str:
        """Look something up."""
        return "found"

    script: list[Any] = [RuntimeError("the model's server is down")]
    state, turn, rest = await _serve(spans, look, script, live=False)
    assert state == "failed"
    (chat,) = [s for s in rest if s.name.startswith("chat ")]
    assert _parent(chat) == turn.context.span_id
    assert chat.status.status_code == trace.StatusCode.ERROR
