"""Prometheus metrics of one app: ``create_app(service, metrics=True)`` serves ``GET /metrics``.

Each app counts in a registry of its own, not prometheus_client's global one, so several
apps in one process (tests; an application that mounts two) never mix. Three sources:

- the replica's observer calls (:mod:`steerable.service._observe`): claims, steers taken
  and their waits, lost leases, turns' ends;
- the store's calls, timed by a proxy the service is given in place of its store
  (:func:`timed_store`): the same verbs and abilities as the store, nothing more, so every
  ``isinstance`` of a store Protocol answers as it did;
- the HTTP requests, by a middleware, labelled by the route's path template
  (``/v1/sessions/{sid}/messages``), never the raw path.

Two gauges are read when scraped: the queue's depth (two bounded reads of the sessions
listing) and the event streams open. No label holds a session id, a tenant or anything a
caller chose, so ``/metrics`` is served without a token (docs/observability.md).
"""

from __future__ import annotations

import inspect
import logging
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from steerable._extras import missing_extra

try:
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
except ImportError as exc:
    raise missing_extra(
        "steerable.service.http._metrics", "metrics", "prometheus-client", exc
    ) from None

from fastapi import FastAPI
from fastapi.responses import Response
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from steerable.errors import UsageError
from steerable.service import Service
from steerable.service._observe import TurnReport
from steerable.service._service import MAX_PAGE
from steerable.service_store import END_STATES, Claim, Notifying, ServiceStore, SessionState
from steerable.store import Forkable, Journaling, Repairable, Rewritable, Store

__all__ = ["CONTENT_TYPE", "HttpMetrics", "Metrics", "UNMATCHED", "timed_store"]

log = logging.getLogger("steerable.service.http")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The text exposition format every Prometheus reads."""
UNMATCHED = "unmatched"
"""The route label of a request no route matched (its path is the caller's text)."""
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})
_WORKING: tuple[SessionState, ...] = ("queued", "running")  # the sessions where inputs can wait

_STORE_SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_WAIT_SECONDS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0)
_TURN_SECONDS = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
_TURN_STEPS = (1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 21.0, 34.0, 55.0, 89.0)
_HTTP_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class Metrics:
    """The instruments of one app over ``service``, and the observer its replica calls.

    :meth:`watch` hooks them to the service (before it serves), :meth:`install` to the app;
    ``streams`` counts the open event streams when scraped.
    """

    def __init__(self, service: Service, streams: Callable[[], int]) -> None:
        self.service = service
        self.registry = r = CollectorRegistry()
        self.turns_ended = Counter(
            "steerable_turns_ended", "Turns this replica ended, by state.", ["state"], registry=r
        )
        self.steers = Counter(
            "steerable_steers",
            "Steers by fate: taken at a step of this replica's turns, or own_turn (a steer"
            " this replica claimed as a turn of its own).",
            ["fate"],
            registry=r,
        )
        self.steer_wait = Histogram(
            "steerable_steer_wait_seconds",
            "Seconds from a steer's arrival to the step that took it.",
            buckets=_WAIT_SECONDS,
            registry=r,
        )
        self.turn_seconds = Histogram(
            "steerable_turn_seconds",
            "Seconds this replica held a turn, from its claim to its end's record.",
            buckets=_TURN_SECONDS,
            registry=r,
        )
        self.turn_steps = Histogram(
            "steerable_turn_steps",
            "Steps of the turns this replica ended (a takeover's earlier steps too).",
            buckets=_TURN_STEPS,
            registry=r,
        )
        self.claims = Counter(
            "steerable_claims",
            "Turns this replica claimed: fresh, or takeover (a turn whose lease expired).",
            ["kind"],
            registry=r,
        )
        self.lost = Counter(
            "steerable_fenced",
            "Turns this replica lost to another (a write refused: the lease had moved on).",
            registry=r,
        )
        self.queue_depth = Gauge(
            "steerable_queue_depth",
            "Inputs waiting to be turns, in the store (the same on every replica).",
            registry=r,
        )
        self.running = Gauge("steerable_running_turns", "Turns this replica runs.", registry=r)
        self.running.set_function(self._running)
        self.streams = Gauge(
            "steerable_sse_streams", "Event streams open on this replica.", registry=r
        )
        self.streams.set_function(lambda: float(streams()))
        self.http_requests = Counter(
            "steerable_http_requests",
            "HTTP requests answered, by route template, method and status.",
            ["route", "method", "status"],
            registry=r,
        )
        self.http_seconds = Histogram(
            "steerable_http_request_seconds",
            "Seconds to answer an HTTP request (an event stream: as long as it was open).",
            ["route"],
            buckets=_HTTP_SECONDS,
            registry=r,
        )
        self.store_seconds = Histogram(
            "steerable_store_call_seconds",
            "Seconds of each call of the service to its store, by store and verb.",
            ["store", "verb"],
            buckets=_STORE_SECONDS,
            registry=r,
        )
        for state in END_STATES:  # each series from 0, so a rate sees the first one
            self.turns_ended.labels(state)
        for fate in ("taken", "own_turn"):
            self.steers.labels(fate)
        for kind in ("fresh", "takeover"):
            self.claims.labels(kind)

    def watch(self, service: Service) -> None:
        """Hear ``service``'s replica and time its store calls (views, inputs and the
        replica's alike); refused once it serves: its replica holds the store already."""
        if service.replica is not None:
            raise UsageError("metrics are set up before the service serves: create the app first")
        service.observers = (*service.observers, self)
        timed = timed_store(service.store, self.store_seconds)
        service.store = timed
        service._core = timed  # the replica's core verbs: the same store, typed apart

    def install(self, app: FastAPI) -> None:
        """``GET /metrics`` on ``app`` (not in the API's schema, no token needed), and the
        middleware that counts its requests: add it after the app's own, outside them."""
        metrics = self

        @app.get("/metrics", include_in_schema=False)
        async def scrape() -> Response:
            """The metrics, for Prometheus."""
            return Response(await metrics.exposition(), media_type=CONTENT_TYPE)

        app.add_middleware(HttpMetrics, metrics=self, routes=app.router.routes)

    def _running(self) -> float:
        replica = self.service.replica
        return 0.0 if replica is None else float(len(replica.counters.running))

    # -- the replica's observer ---------------------------------------------------------------

    def claimed(self, claim: Claim) -> None:
        """A claim: fresh or a takeover; a steer claimed as its own turn counts as one."""
        self.claims.labels("takeover" if claim.resumed else "fresh").inc()
        if claim.prompt.kind == "steer" and not claim.resumed:
            self.steers.labels("own_turn").inc()

    def steers_taken(self, session: str, turn: str, waits: Sequence[float]) -> None:
        """A step took steers: each is counted, and how long it waited."""
        self.steers.labels("taken").inc(len(waits))
        for wait in waits:
            self.steer_wait.observe(wait)

    def fenced(self, session: str) -> None:
        """A turn was lost to another replica."""
        self.lost.inc()

    def turn_ended(self, report: TurnReport) -> None:
        """A turn's end: its state, this holder's seconds on it, its steps."""
        self.turns_ended.labels(report.state).inc()
        self.turn_seconds.observe(report.seconds)
        self.turn_steps.observe(report.steps)

    # -- scraping -------------------------------------------------------------------------------

    async def exposition(self) -> bytes:
        """The registry in Prometheus's text format, the queue's depth read first."""
        self.queue_depth.set(await self._depth())
        return generate_latest(self.registry)

    async def _depth(self) -> float:
        """The inputs waiting to be turns in the sessions with work: those with a turn
        running and those with inputs queued, a page of each (a lower bound past 1000)."""
        depth = 0
        try:
            for state in _WORKING:
                page = await self.service.store.sessions(
                    prefix="", after=None, limit=MAX_PAGE, state=state
                )
                depth += sum(summary.queued for summary in page)
        except Exception as exc:  # the scrape goes on; the gauge says it is not known
            log.warning("the queue's depth was not read: %s", exc)
            return math.nan
        return float(depth)


class HttpMetrics:
    """ASGI middleware: each HTTP request counted by route template, method and status, and
    timed. The route is found by matching ``routes`` (a middleware sees no routing)."""

    def __init__(self, app: ASGIApp, metrics: Metrics, routes: Sequence[BaseRoute]) -> None:
        self.app = app
        self.metrics = metrics
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500  # unless an answer starts: the app raised
        began = time.perf_counter()

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = self.route(scope)
            method = str(scope.get("method", ""))
            method = method if method in _METHODS else "other"
            metrics = self.metrics
            metrics.http_requests.labels(route, method, str(status)).inc()
            metrics.http_seconds.labels(route).observe(time.perf_counter() - began)

    def route(self, scope: Scope) -> str:
        """The path template of the route ``scope`` is for (a wrong method still names
        it), else :data:`UNMATCHED`."""
        for route in self.routes:
            match, _ = route.matches(scope)
            if match is not Match.NONE:
                path = getattr(route, "path", None)
                return path if isinstance(path, str) else UNMATCHED
        return UNMATCHED


# -- the timed store ----------------------------------------------------------------------------

_ABILITIES: tuple[type, ...] = (
    Store,
    ServiceStore,
    Notifying,
    Rewritable,
    Forkable,
    Journaling,
    Repairable,
)
"""The Protocols whose methods a timed store has wherever its store has them."""

_CLASSES: dict[tuple[type, frozenset[str]], type[_Timed]] = {}


def _members() -> dict[str, bool]:
    """Each method of the store Protocols, and whether it is a call to time (a coroutine;
    ``hints`` is a subscription that lasts as long as the replica serves: passed on)."""
    found: dict[str, bool] = {}
    for protocol in _ABILITIES:
        for name, value in vars(protocol).items():
            if not name.startswith("_") and callable(value):
                found[name] = inspect.iscoroutinefunction(value)
    return found


_MEMBERS = _members()


class _Timed:
    """The base of a timed store's class (see :func:`timed_store`)."""

    def __init__(self, inner: Any, seconds: Histogram) -> None:
        self._inner = inner
        self.__wrapped__ = inner  # whose verbs' keywords the service asks about
        self._seconds = seconds
        self._store = type(inner).__name__

    def __getattr__(self, name: str) -> Any:
        # anything else the store has (a pool, a method of its own), as it is and untimed
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._inner, name)

    def __repr__(self) -> str:
        return repr(self._inner)


def _timed(verb: str) -> Callable[..., Awaitable[Any]]:
    async def call(self: _Timed, *args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return await getattr(self._inner, verb)(*args, **kwargs)
        finally:
            self._seconds.labels(self._store, verb).observe(time.perf_counter() - began)

    call.__name__ = call.__qualname__ = verb
    return call


def _passed(name: str) -> Callable[..., Any]:
    def call(self: _Timed, *args: Any, **kwargs: Any) -> Any:
        return getattr(self._inner, name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    return call


def timed_store(store: Any, seconds: Histogram) -> Any:
    """``store`` with each call of a store Protocol's verb timed in ``seconds`` (labels:
    the store's class name, the verb).

    Its class has exactly the Protocols' methods ``store`` has (and its name), so each
    ``isinstance(..., Store/ServiceStore/Notifying/Forkable/...)``, ``journaling()`` and
    ``repairable()`` answers as for ``store``; every other attribute is the store's own.
    """
    kind = type(store)
    names = frozenset(n for n in _MEMBERS if callable(getattr(store, n, None)))
    cls = _CLASSES.get((kind, names))
    if cls is None:
        namespace: dict[str, Any] = {
            name: _timed(name) if _MEMBERS[name] else _passed(name) for name in sorted(names)
        }
        namespace["__qualname__"] = kind.__qualname__
        cls = _CLASSES[(kind, names)] = type(kind.__name__, (_Timed,), namespace)
    return cls(store, seconds)
