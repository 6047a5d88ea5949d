"""The ``chat`` and ``execute_tool`` spans an integration makes for a framework that has none.

LangGraph and the OpenAI Agents SDK make no OpenTelemetry spans of their own (LangChain has
callbacks, the SDK its own tracing), so their integrations make these, by the GenAI
conventions and as :mod:`steerable.loop` does: a child of the current span (under the
service, the turn's ``invoke_agent``), ``gen_ai.conversation.id`` the session. With no SDK
provider set, :func:`steerable.telemetry.tracer` is None and every helper here returns at
once. Content (tool arguments and results) only when the conventions' switch is on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from steerable import telemetry

if TYPE_CHECKING:
    from opentelemetry.trace import Span

__all__ = ["chat_span", "replied", "start_chat", "start_tool", "tool_ended", "tool_span"]


def _chat(session: str, model: str, provider: str | None) -> tuple[str, dict[str, Any]]:
    values: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": model,
        "gen_ai.conversation.id": session,
    }
    if provider:
        values["gen_ai.provider.name"] = provider
    return f"chat {model}", values


def _tool(session: str, name: str, call_id: str, arguments: str) -> tuple[str, dict[str, Any]]:
    values: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.type": "function",
        "gen_ai.conversation.id": session,
    }
    if call_id:
        values["gen_ai.tool.call.id"] = call_id
    if telemetry.capture_content():
        values["gen_ai.tool.call.arguments"] = arguments
    return f"execute_tool {name}", values


def start_chat(session: str, model: str, provider: str | None) -> Span | None:
    """A started (not current) ``chat`` span under the current span; None when none records."""
    found = telemetry.tracer()
    if found is None:
        return None
    from opentelemetry.trace import SpanKind

    name, values = _chat(session, model, provider)
    return found.start_span(name, kind=SpanKind.CLIENT, attributes=values)


def start_tool(session: str, name: str, call_id: str, arguments: str) -> Span | None:
    """A started (not current) ``execute_tool`` span; None when none records."""
    found = telemetry.tracer()
    if found is None:
        return None
    span_name, values = _tool(session, name, call_id, arguments)
    return found.start_span(span_name, attributes=values)


@contextlib.contextmanager
def chat_span(session: str, model: str, provider: str | None) -> Iterator[Span | None]:
    """A ``chat`` span, current in the block (what the model call makes nests under it).

    An exception out of the block marks it failed; the caller ends it well otherwise."""
    found = telemetry.tracer()
    if found is None:
        yield None
        return
    from opentelemetry.trace import SpanKind

    name, values = _chat(session, model, provider)
    with _current(found, name, values, SpanKind.CLIENT) as span:
        yield span


@contextlib.contextmanager
def tool_span(
    session: str,
    name: str,
    call_id: str,
    arguments: str,
    *,
    spared: tuple[type[BaseException], ...] = (),
) -> Iterator[Span | None]:
    """An ``execute_tool`` span, current in the block; an exception out of it marks it
    failed, unless it is one of ``spared`` (LangGraph's interrupt: the call is not over)."""
    found = telemetry.tracer()
    if found is None:
        yield None
        return
    from opentelemetry.trace import SpanKind

    span_name, values = _tool(session, name, call_id, arguments)
    with _current(found, span_name, values, SpanKind.INTERNAL, spared) as span:
        yield span


@contextlib.contextmanager
def _current(
    found: Any,
    name: str,
    values: dict[str, Any],
    kind: Any,
    spared: tuple[type[BaseException], ...] = (),
) -> Iterator[Span]:
    # Our own error marking: the SDK's would call a cancellation (a stop) a failure.
    with found.start_as_current_span(
        name, kind=kind, attributes=values, record_exception=False, set_status_on_exception=False
    ) as span:
        try:
            yield span
        except spared:
            raise
        except Exception as exc:
            telemetry.failed(span, exc)
            raise


def replied(
    span: Span | None,
    *,
    usage: Mapping[str, int] | None = None,
    finish_reasons: Sequence[str] = (),
    response_id: str | None = None,
    response_model: str | None = None,
) -> None:
    """Put a model reply's usage, finish reasons and ids on its ``chat`` span."""
    if span is None:
        return
    if usage:
        span.set_attributes(telemetry.usage_attributes(usage))
    if finish_reasons:
        span.set_attribute("gen_ai.response.finish_reasons", list(finish_reasons))
    if response_id:
        span.set_attribute("gen_ai.response.id", response_id)
    if response_model:
        span.set_attribute("gen_ai.response.model", response_model)


def tool_ended(span: Span | None, result: str, *, is_error: bool) -> None:
    """Put a tool call's result (content only when asked for) and error on its span."""
    if span is None:
        return
    if telemetry.capture_content():
        span.set_attribute("gen_ai.tool.call.result", result)
    if is_error:
        telemetry.failed(span, result, "tool_error")
