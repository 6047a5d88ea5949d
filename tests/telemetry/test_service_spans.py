"""The spans of a service turn, through the real SDK and its in-memory exporter.

A turn with two tool calls, steered from another process (its own tracer provider) while
the calls run: the turn's ``invoke_agent`` span is a child of the send's span, its model
requests and tool calls are its children with the conventions' names and attributes, and
the request of the step that took the steer links to the other process's steer span.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from steerable.models.base import ModelRequest
from steerable.models.scripted import ScriptedModel, call
from steerable.service import ReActAgent, Service
from steerable.spec import Spec
from steerable.stores.sqlite import SQLiteStore
from steerable.tools import tool

ROOT = Path(__file__).resolve().parents[2]


def _named(spans: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def _parent(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


async def _steer_from_another_process(url: str, session: str, text: str) -> dict[str, Any]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.telemetry.steer_process",
        url,
        session,
        text,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    found: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return found


async def test_a_steered_turn_s_span_tree(spans: InMemorySpanExporter, tmp_path: Path) -> None:
    gate = asyncio.Event()
    running = asyncio.Event()

    @tool
    async def look(q: str) -> str:
        """Look something up."""
        running.set()
        await gate.wait()
        return f"found {q}"

    def answer(request: ModelRequest) -> str:
        return "done: " + request.messages[-1].text

    model = ScriptedModel(
        [[call("look", '{"q": "a"}'), call("look", '{"q": "b"}')], answer], name="acme:m-1"
    )
    agent = ReActAgent(Spec(tools=[look], max_steps=5), model)
    path = tmp_path / "spans.db"
    async with SQLiteStore(path) as store:
        service = Service(store, agent, poll=0.05, replica="r1")
        tracer = trace.get_tracer("the-client")
        async with service.serving():
            with tracer.start_as_current_span("client request") as client:
                accepted = await service.send("s", "look up a and b")
            await asyncio.wait_for(running.wait(), 10)
            steer = await _steer_from_another_process(f"sqlite:///{path}", "s", "and c")
            assert steer["turn"] == accepted.id
            gate.set()
            done = await service.wait("s", accepted.id, seconds=10)
        assert done is not None and done.state == "completed", done
        assert done.text == "done: and c"  # the steer was taken at step 2
    finished = list(spans.get_finished_spans())

    (send,) = _named(finished, "steerable send")
    assert _parent(send) == client.get_span_context().span_id
    assert send.attributes is not None and send.attributes["steerable.input.id"] == accepted.id
    (turn,) = _named(finished, "invoke_agent ReActAgent")
    assert _parent(turn) == send.context.span_id  # the turn continues the send's trace
    assert turn.context.trace_id == client.get_span_context().trace_id
    assert turn.attributes is not None
    assert turn.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert turn.attributes["gen_ai.conversation.id"] == "s"
    assert turn.attributes["steerable.turn.id"] == accepted.id
    assert turn.attributes["steerable.replica"] == "r1"
    assert turn.attributes["steerable.turn.state"] == "completed"
    assert turn.attributes["steerable.turn.steps"] == done.steps  # the store's count of saves
    assert turn.attributes["steerable.turn.steers"] == 1

    chats = sorted(_named(finished, "chat m-1"), key=lambda s: s.start_time or 0)
    tools = _named(finished, "execute_tool look")
    assert len(chats) == 2 and len(tools) == 2
    for span in [*chats, *tools]:
        assert _parent(span) == turn.context.span_id
        assert span.context.trace_id == turn.context.trace_id
    first, second = chats
    assert first.attributes is not None and second.attributes is not None
    assert first.attributes["gen_ai.operation.name"] == "chat"
    assert first.attributes["gen_ai.provider.name"] == "acme"
    assert first.attributes["gen_ai.request.model"] == "m-1"
    assert first.attributes["gen_ai.conversation.id"] == "s"
    assert "gen_ai.usage.input_tokens" in first.attributes
    assert first.kind == trace.SpanKind.CLIENT
    assert {t.attributes["gen_ai.tool.call.id"] for t in tools if t.attributes} == {
        c.id for c in model.requests[1].messages[1].tool_calls
    }
    assert all(t.attributes and t.attributes["gen_ai.tool.name"] == "look" for t in tools)

    # The step that took the steer links to the other process's span; the first does not.
    assert list(first.links) == []
    (link,) = second.links
    assert f"{link.context.trace_id:032x}" == steer["trace"]
    assert f"{link.context.span_id:016x}" == steer["span"]
    assert link.attributes is not None and link.attributes["steerable.input.id"] == steer["id"]
    # ...and so does the turn's span, with an event at the step.
    assert [f"{x.context.span_id:016x}" for x in turn.links] == [steer["span"]]
    assert [e.name for e in turn.events] == ["steerable.steers_taken"]
    # No content unless asked for.
    assert all("gen_ai.input.messages" not in (s.attributes or {}) for s in chats)


async def test_content_only_when_asked(
    spans: InMemorySpanExporter, monkeypatch: Any, tmp_path: Path
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")

    @tool
    def echo(text: str) -> str:
        """Say it back."""
        return text

    model = ScriptedModel([call("echo", '{"text": "secret"}'), "ok"])
    async with SQLiteStore(tmp_path / "c.db") as store:
        service = Service(store, ReActAgent(Spec(tools=[echo]), model), poll=0.05)
        async with service.serving():
            accepted = await service.send("s", "say secret")
            await service.wait("s", accepted.id, seconds=10)
    finished = list(spans.get_finished_spans())
    (tool_span,) = _named(finished, "execute_tool echo")
    assert tool_span.attributes is not None
    assert tool_span.attributes["gen_ai.tool.call.arguments"] == '{"text": "secret"}'
    assert tool_span.attributes["gen_ai.tool.call.result"] == "secret"
    chat = _named(finished, "chat scripted")[0]
    assert chat.attributes is not None
    assert "say secret" in str(chat.attributes["gen_ai.input.messages"])


async def test_a_failed_turn_s_span_says_so(spans: InMemorySpanExporter, tmp_path: Path) -> None:
    def boom(request: ModelRequest) -> str:
        raise RuntimeError("the model's server is down")

    async with SQLiteStore(tmp_path / "f.db") as store:
        service = Service(store, ReActAgent(Spec(), ScriptedModel([boom])), poll=0.05)
        async with service.serving():
            accepted = await service.send("s", "hello")
            done = await service.wait("s", accepted.id, seconds=10)
    assert done is not None and done.state == "failed"
    (turn,) = _named(list(spans.get_finished_spans()), "invoke_agent ReActAgent")
    assert turn.status.status_code == trace.StatusCode.ERROR
    assert turn.attributes is not None and turn.attributes["error.type"] == "RuntimeError"
