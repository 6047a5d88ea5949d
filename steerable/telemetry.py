"""OpenTelemetry spans by the GenAI semantic conventions, through ``opentelemetry-api`` only.

steerable never configures tracing: the SDK and its exporters are the application's choice.
This module imports nothing of OpenTelemetry on its own. It looks for it when a run or a
service call starts: if ``opentelemetry.trace`` has not been imported by anyone, or its
tracer provider is the API's default (no SDK set), there is nothing to record and every
helper here returns at once, so a run without an SDK pays one dictionary lookup.
``STEERABLE_OTEL=1`` imports the API itself (for an SDK set up later in the process).

The spans, by the conventions (``gen_ai.*``, still marked development; set
``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental`` in the application, as they
ask, to read them as the latest names):

- ``invoke_agent {agent}``: one per turn (a run, or a service turn on its holder);
- ``chat {model}``: one per model request, linked to the spans that sent the steers taken
  at the step right before it;
- ``execute_tool {tool}``: one per tool call;
- ``steerable send`` and ``steerable steer``: a service input's arrival. Its trace context
  is kept with the input in the store (:attr:`steerable.service_store.Input.trace`), so the
  turn it starts continues its trace on whichever replica claims it, and the step that
  takes a steer links to it.

Message content (prompts, answers, tool arguments and results) goes on spans only when
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is ``true``, as the conventions say.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from steerable.messages import Part, Text, ToolCall, ToolResult
from steerable.models.base import Usage

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Link, Span, SpanContext, Tracer

__all__ = [
    "capture_content",
    "carrier",
    "link",
    "provider_and_model",
    "recording",
    "tracer",
    "turn_span",
]

CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The conventions' switch for message content on spans (off unless ``true``)."""

_SCOPE = "steerable"
_tracers: dict[int, tuple[Any, Any]] = {}  # provider id -> (the provider, our tracer on it)

_turn: ContextVar[Span | None] = ContextVar("steerable_turn_span", default=None)
"""The ``invoke_agent`` span of the turn running in this context (None outside one)."""


def tracer() -> Tracer | None:
    """steerable's tracer on the configured provider; None when nothing would record."""
    if "opentelemetry.trace" not in sys.modules and os.environ.get("STEERABLE_OTEL") != "1":
        return None
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    held = _tracers.get(id(provider))
    if held is None or held[0] is not provider:  # a new provider (an id may be reused)
        held = _tracers[id(provider)] = (provider, provider.get_tracer(_SCOPE, _version()))
    return held[1]


def _version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("steerable")
    except PackageNotFoundError:
        return None


def recording() -> bool:
    """Whether spans made now would be recorded (a provider is set)."""
    return tracer() is not None


def capture_content() -> bool:
    """Whether message content goes on spans (the conventions' opt-in)."""
    return os.environ.get(CONTENT, "").strip().lower() == "true"


def carrier() -> dict[str, str]:
    """The current span's context as W3C Trace Context headers (``{}`` when none records)."""
    if tracer() is None:
        return {}
    from opentelemetry import propagate

    found: dict[str, str] = {}
    propagate.inject(found)
    return found


def extracted(headers: Mapping[str, str]) -> Context | None:
    """The context a request's ``traceparent`` (and ``tracestate``) carries, if any."""
    if tracer() is None or "traceparent" not in headers:
        return None
    from opentelemetry import propagate

    return propagate.extract(dict(headers))


def span_context(found: Mapping[str, str]) -> SpanContext | None:
    """The span context a stored carrier names; None when it names none that is valid."""
    if not found or tracer() is None:
        return None
    from opentelemetry import propagate, trace

    context = trace.get_current_span(propagate.extract(dict(found))).get_span_context()
    return context if context.is_valid else None


def link(found: Mapping[str, str], attributes: Mapping[str, Any]) -> Link | None:
    """A link to the span a stored carrier names (None when it names none)."""
    context = span_context(found)
    if context is None:
        return None
    from opentelemetry.trace import Link

    return Link(context, dict(attributes))


def provider_and_model(name: str) -> tuple[str, str]:
    """``("openai", "gpt-5")`` of a model name ``"openai:gpt-5"``; a bare name is its own."""
    provider, colon, model = name.partition(":")
    return (provider, model) if colon and model else (name, name)


def current_turn() -> Span | None:
    """The ``invoke_agent`` span of the turn this code runs in, if one records."""
    return _turn.get()


@contextlib.contextmanager
def turn_span(
    agent: str,
    session: str | None,
    *,
    model: str | None = None,
    parent: Mapping[str, str] | None = None,
    attributes: Mapping[str, Any] | None = None,
) -> Iterator[Span | None]:
    """The ``invoke_agent`` span of a turn, current in the block; None when nothing records.

    ``parent``: the stored carrier of the input that started the turn (its span is the
    parent, on whichever replica this runs); else the current context's span.
    """
    found = tracer()
    if found is None:
        yield None
        return
    from opentelemetry import propagate, trace

    context = propagate.extract(dict(parent)) if parent else None
    values: dict[str, Any] = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent}
    if session is not None:
        values["gen_ai.conversation.id"] = session
    if model is not None:
        provider, name = provider_and_model(model)
        values["gen_ai.provider.name"] = provider
        values["gen_ai.request.model"] = name
    values.update(attributes or {})
    with found.start_as_current_span(
        f"invoke_agent {agent}", context=context, kind=trace.SpanKind.INTERNAL, attributes=values
    ) as span:
        token = _turn.set(span)
        try:
            yield span
        finally:
            _turn.reset(token)


def input_span(kind: str, session: str, id: str | None) -> contextlib.AbstractContextManager[Any]:
    """The span of a service input's arrival (``steerable send``/``steerable steer``)."""
    found = tracer()
    if found is None:
        return contextlib.nullcontext(None)
    from opentelemetry import trace

    values: dict[str, Any] = {"steerable.input.kind": kind}
    if session:
        values["gen_ai.conversation.id"] = session
    if id is not None:
        values["steerable.input.id"] = id
    return found.start_as_current_span(
        f"steerable {kind}", kind=trace.SpanKind.INTERNAL, attributes=values
    )


def content(value: object) -> str:
    """A value as a span attribute's text (JSON unless it is a str already)."""
    return value if isinstance(value, str) else json.dumps(value, default=str)


def usage_attributes(usage: Usage | Mapping[str, int]) -> dict[str, int]:
    """The conventions' token counts of a usage (only those it knows)."""
    if isinstance(usage, Usage):
        usage = {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens}
    found: dict[str, int] = {}
    for ours, theirs in (
        ("input_tokens", "gen_ai.usage.input_tokens"),
        ("output_tokens", "gen_ai.usage.output_tokens"),
    ):
        if usage.get(ours):
            found[theirs] = int(usage[ours])
    return found


def part(value: Part) -> dict[str, Any]:
    """A message part as the conventions' message JSON has it."""
    if isinstance(value, Text):
        return {"type": "text", "content": value.text}
    if isinstance(value, ToolCall):
        return {
            "type": "tool_call",
            "id": value.id,
            "name": value.name,
            "arguments": value.arguments,
        }
    if isinstance(value, ToolResult):
        return {"type": "tool_call_response", "id": value.call_id, "response": value.content}
    return {"type": type(value).__name__.lower()}


def failed(span: Span | None, error: BaseException | str | None, kind: str | None = None) -> None:
    """Mark ``span`` failed: status ERROR and ``error.type``, as the conventions say."""
    if span is None or error is None:
        return
    from opentelemetry.trace import Status, StatusCode

    name = kind or (type(error).__qualname__ if isinstance(error, BaseException) else "error")
    span.set_attribute("error.type", name)
    span.set_status(Status(StatusCode.ERROR, str(error)[:500]))


def links(found: Sequence[Link | None]) -> list[Link]:
    """The links that are there."""
    return [one for one in found if one is not None]
