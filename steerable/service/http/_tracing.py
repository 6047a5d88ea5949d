"""A request's trace context: the ``traceparent`` (and ``tracestate``) it came with.

While a provider records (:mod:`steerable.telemetry`), a request that carries W3C Trace
Context headers runs inside the context they name (unless an outer layer, FastAPI's own
spans or an ASGI instrumentation, made the request's span from them already), so the span
of a send or a steer is in the caller's trace, and the input keeps that trace for the turn
it starts. Without
a provider nothing is read: the middleware passes the request on as it came.
"""

from __future__ import annotations

from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from steerable import telemetry

__all__ = ["TraceContext"]

_HEADERS = (b"traceparent", b"tracestate")


class TraceContext:
    """ASGI middleware: run each HTTP request in the trace context its headers carry."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not telemetry.recording():
            await self.app(scope, receive, send)
            return
        headers = {
            name.decode("latin-1"): value.decode("latin-1")
            for name, value in scope["headers"]
            if name in _HEADERS
        }
        context = telemetry.extracted(headers)
        if context is None or _inside_a_span():
            await self.app(scope, receive, send)
            return
        from opentelemetry import context as otel  # recording: the API is loaded

        token: Any = otel.attach(context)
        try:
            await self.app(scope, receive, send)
        finally:
            otel.detach(token)


def _inside_a_span() -> bool:
    """Whether the request runs in a span already (FastAPI's, or an ASGI instrumentation's,
    which read the headers themselves): then the input's span is a child of that one."""
    from opentelemetry import trace

    return trace.get_current_span().get_span_context().is_valid
