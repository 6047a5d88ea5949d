"""The FastAPI app of the service: ``create_app(service, ...)``; routes in :mod:`._routes`."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI
from starlette.middleware.cors import CORSMiddleware

from steerable.errors import UsageError
from steerable.service import Service
from steerable.service._service import MAX_TEXT
from steerable.service.http._console import add_console
from steerable.service.http._context import Context, known_query
from steerable.service.http._edge import HeadAsGet, TrailingSlash, check_origins, cors_options
from steerable.service.http._limits import BodyTimeout, Limits, TenantLimits
from steerable.service.http._live import LiveFeed, LocalLive, Waking
from steerable.service.http._problems import (
    BearerGate,
    BodyLimit,
    check_tokens,
    install_handlers,
)
from steerable.service.http._protocols import check_protocols, mount_protocols
from steerable.service.http._request_id import RequestIds
from steerable.service.http._routes import add_routes
from steerable.service.http._schema import refine_schema, sid_room
from steerable.service.http._tracing import TraceContext

__all__ = ["MAX_BODY", "Limits", "create_app", "live_feed"]

MAX_BODY = MAX_TEXT + 100_000
"""The default bound of a request body: the longest text, escaped a little, and the rest."""


def live_feed(store: object) -> LiveFeed:
    """The live feed that suits ``store``: Postgres notifications, else this process only."""
    if type(store).__module__.startswith("steerable.stores.postgres"):
        from steerable.stores.postgres._live import PostgresLive

        pool: Any = getattr(store, "pool")  # noqa: B009 - typed Any: the store's own attribute
        return PostgresLive(pool)
    return LocalLive()


def _positive(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise UsageError(f"`{what}` is a number of seconds, not {value!r}")
    if value <= 0:
        raise UsageError(f"`{what}` is > 0, not {value!r}")
    return float(value)


def create_app(
    service: Service,
    *,
    tokens: Mapping[str, str] | None = None,
    allow_tenantless: bool = True,
    live: LiveFeed | None = None,
    serve: bool = True,
    keepalive: float = 15.0,
    poll: float = 0.5,
    max_body: int = MAX_BODY,
    cors_origins: Sequence[str] = (),
    limits: Limits | None = None,
    body_timeout: float = 30.0,
    metrics: bool = False,
    protocols: Sequence[str] = (),
) -> FastAPI:
    """The HTTP API over ``service``, as a FastAPI app.

    ``tokens`` maps bearer tokens to tenant names; without it the app serves one tenant,
    ``default``, with no auth (refused when ``allow_tenantless`` is False). ``live`` is where
    the event streams read text deltas from: give the same feed's ``sink`` to the Service
    as ``live=`` (:func:`live_feed` picks one for a store); the app gives the service the
    feed's ``wake`` too (unless it has one), so the streams read new events at once.
    While the app runs (its lifespan) it enters the feed and, with ``serve`` and an agent,
    serves turns too
    (``service.serving()``). Event streams send a keep-alive comment after ``keepalive``
    seconds of silence and read the store at most ``poll`` seconds apart. A request body
    over ``max_body`` bytes is 413 ``too_large``, refused before the rest of it is read.
    ``cors_origins`` lists the origins (``https://app.example``; ``["*"]``: any) whose pages
    may call the API from a browser; none by default (CORS off). HEAD is answered wherever
    GET is, and a path with a trailing slash is redirected (307) to the one without.
    ``limits`` bounds each tenant's inputs a second and open event streams, counted in this
    process (429 with ``Retry-After`` beyond them; by default no rate and 100 streams); a
    request body that stalls for ``body_timeout`` seconds is 408. Every answer that lists
    (status, transcript, inputs) stops at about 4 MB of text and says where to go on.
    The web console (docs/console.md) is served at ``/console``: a page whose script calls
    this API with the token its user types. ``metrics`` serves Prometheus metrics at
    ``/metrics``, with no token and no tenant's data (docs/observability.md; the
    ``metrics`` extra): give it a service that does not serve yet. Every answer carries an
    ``X-Request-Id`` (the client's, if it sent a plain one), and so does every log line
    written for the request (as ``request_id``, through ``steerable._logs.RequestIdFilter``).
    ``protocols`` names the open protocols the app speaks too, each mounted under ``/v1/``
    behind the same tokens and tenants: ``a2a``, ``mcp``, ``ag-ui`` (each its own extra;
    docs/protocols.md).
    """
    if not isinstance(service, Service):
        raise UsageError(f"create_app takes a steerable.service.Service, not {service!r}")
    checked = check_tokens(tokens, allow_tenantless)
    origins = check_origins(cors_origins)
    feed = LocalLive() if live is None else live
    if not isinstance(feed, LiveFeed):
        raise UsageError(f"`live` has no sink, subscribe and running: {live!r}")
    if service.wake is None and isinstance(feed, Waking):
        service.wake = feed.wake  # the service's writes wake the streams that show them
    if isinstance(max_body, bool) or not isinstance(max_body, int) or max_body < 1:
        raise UsageError(f"`max_body` is a number of bytes > 0, not {max_body!r}")
    bounds = Limits() if limits is None else limits
    if not isinstance(bounds, Limits):
        raise UsageError(f"`limits` is a steerable.service.http.Limits, not {limits!r}")
    context = Context(
        service,
        feed,
        _positive(keepalive, "keepalive"),
        _positive(poll, "poll"),
        TenantLimits(bounds),
    )
    read_timeout = _positive(body_timeout, "body_timeout")
    spoken = check_protocols(protocols)
    if not isinstance(metrics, bool):
        raise UsageError(f"`metrics` is True or False, not {metrics!r}")
    meter = None
    if metrics:
        from steerable.service.http._metrics import Metrics  # the metrics extra's

        meter = Metrics(service, context.limits.all_streams)
        meter.watch(service)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            await stack.enter_async_context(feed.running())
            if serve and service.agent is not None and service.replica is None:
                await stack.enter_async_context(service.serving())
            yield

    app = FastAPI(
        title="steerable",
        summary="Sessions as queues of turns: send, steer, stop, watch.",
        version="1",
        lifespan=lifespan,
        dependencies=[Depends(known_query)],
        redirect_slashes=False,  # TrailingSlash redirects, with a relative Location
    )
    app.state.service = service
    app.state.live = feed
    install_handlers(app)
    add_routes(app, context, bearer=bool(checked))
    add_console(app)
    mount_protocols(app, context, spoken)
    app.add_middleware(BodyLimit, max_body=max_body)  # inside the gate: 401 comes first
    app.add_middleware(BodyTimeout, seconds=read_timeout)  # outside BodyLimit, which reads
    app.add_middleware(BearerGate, tokens=checked)
    app.add_middleware(TraceContext)  # outside the gate: a refused request is in the trace too
    app.add_middleware(HeadAsGet)
    app.add_middleware(TrailingSlash)
    if origins:  # outside the gate: a preflight is answered before it, a 401 gets its headers
        app.add_middleware(CORSMiddleware, **cors_options(origins))
    if meter is not None:  # /metrics, and a middleware outside the rest: every answer counts
        meter.install(app)
    app.add_middleware(RequestIds)  # outermost: every answer has the id, and its log lines
    refine_schema(app, bearer=bool(checked), room=sid_room(list(checked.values())))
    return app
