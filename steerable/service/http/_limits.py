"""The API's bounds: a tenant's input rate and open streams, a request body's read timeout,
and the byte budget of one answer.

The rate and the streams are counted by this process (each replica counts its own: behind a
load balancer of N replicas a tenant gets up to N times the rate); a tenant over either is
answered 429 with ``Retry-After``. A body that stalls is answered 408 and its connection
closed. What the store bounds (inputs waiting per session) is the service's
(``Service(max_waiting=)``), answered 429 too.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from steerable.messages import Message as Stored
from steerable.messages import Native, Reasoning, Text, ToolCall, ToolResult
from steerable.service.http._problems import ProblemError, problem
from steerable.service_store import InputView

__all__ = [
    "ANSWER_BYTES",
    "BodyTimeout",
    "Limits",
    "TenantLimits",
    "fitting",
    "input_size",
    "message_size",
    "read_within_budget",
]

ANSWER_BYTES = 4_000_000
"""About the most bytes of text one answer carries: a page stops before it would pass this
(always holding one item, so a page can grow past it by one input or message)."""


T = TypeVar("T")


def fitting(items: Sequence[T], size: Callable[[T], int]) -> list[T]:
    """The first of ``items`` that fit the budget together (one at least)."""
    kept: list[T] = []
    spent = 0
    for item in items:
        spent += size(item)
        if kept and spent > ANSWER_BYTES:
            break
        kept.append(item)
    return kept


async def read_within_budget(
    read: Callable[[int, int], Awaitable[Sequence[T]]],
    *,
    after: int,
    limit: int,
    chunk: int,
    size: Callable[[T], int],
    key: Callable[[T], int],
) -> tuple[list[T], bool]:
    """Up to ``limit`` items read after ``after``, ``chunk`` at a time (``read(after, n)``),
    stopped before they pass the budget (one at least): memory stays bounded however large
    each item. Also whether more may follow (the page is full, by count or by bytes)."""
    items: list[T] = []
    spent = 0
    while len(items) < limit:
        want = min(chunk, limit - len(items))
        page = await read(after, want)
        for item in page:
            spent += size(item)
            if items and spent > ANSWER_BYTES:
                return items, True
            items.append(item)
            after = key(item)
        if len(page) < want:
            return items, False
    return items, True


def input_size(view: InputView) -> int:
    """About the bytes an input takes in an answer."""
    return len(view.text.encode("utf-8")) + len(str(view.metadata)) + 200


def message_size(message: Stored) -> int:
    """About the bytes a message takes in an answer."""
    size = 200
    for part in message.parts:
        if isinstance(part, Text | Reasoning | Native):
            size += len(part.text.encode("utf-8"))
        elif isinstance(part, ToolCall):
            size += len(part.arguments.encode("utf-8")) + len(part.name)
        elif isinstance(part, ToolResult):
            size += len(part.content.encode("utf-8")) + len(part.name)
    return size


@dataclass(frozen=True, slots=True)
class Limits:
    """The settings: inputs a tenant may send per second (``rate``, with bursts of
    ``burst``; None: no bound) and event streams it may hold open (None: no bound)."""

    rate: float | None = None
    burst: int = 100
    streams: int | None = 100


@dataclass
class _Bucket:
    tokens: float
    at: float


@dataclass
class TenantLimits:
    """The counters of :class:`Limits`, per tenant, in this process."""

    limits: Limits
    _buckets: dict[str, _Bucket] = field(default_factory=dict)
    _streams: dict[str, int] = field(default_factory=dict)

    def spend(self, tenant: str) -> None:
        """Take one input from ``tenant``'s rate, or 429 ``rate_limited``."""
        rate = self.limits.rate
        if rate is None:
            return
        now = time.monotonic()
        bucket = self._buckets.get(tenant)
        if bucket is None:
            bucket = self._buckets[tenant] = _Bucket(float(self.limits.burst), now)
        bucket.tokens = min(float(self.limits.burst), bucket.tokens + (now - bucket.at) * rate)
        bucket.at = now
        if bucket.tokens < 1:
            wait = max(1, math.ceil((1 - bucket.tokens) / rate))
            raise ProblemError(
                429,
                "rate_limited",
                f"this tenant sends more than {rate:g} inputs a second; try again later",
                {"Retry-After": str(wait)},
            )
        bucket.tokens -= 1
        if len(self._buckets) > 10_000:  # forget the full buckets of tenants gone quiet
            self._buckets = {t: b for t, b in self._buckets.items() if b.tokens < self.limits.burst}

    def hold_stream(self, tenant: str) -> Callable[[], None]:
        """Hold one of ``tenant``'s event streams, or 429 ``too_many_streams``; the function
        returned lets it go (once, however often it is called)."""
        most = self.limits.streams
        open_now = self._streams.get(tenant, 0)
        if most is not None and open_now >= most:
            raise ProblemError(
                429,
                "too_many_streams",
                f"this tenant has {most} event streams open here, its most; close one",
                {"Retry-After": "5"},
            )
        self._streams[tenant] = open_now + 1
        held = True

        def release() -> None:
            nonlocal held
            if held:
                held = False
                left = self._streams[tenant] - 1
                if left:
                    self._streams[tenant] = left
                else:
                    del self._streams[tenant]

        return release

    def open_streams(self, tenant: str) -> int:
        """How many event streams ``tenant`` holds open here."""
        return self._streams.get(tenant, 0)

    def all_streams(self) -> int:
        """How many event streams every tenant together holds open here (``/metrics``)."""
        return sum(self._streams.values())


class _Stalled(HTTPException):
    """A request body that stopped arriving: an HTTP error, so the app's own handler (past
    FastAPI's body reading, which re-raises these) answers it as a problem."""

    def __init__(self, seconds: float) -> None:
        super().__init__(408, f"the request body stalled (nothing for {seconds:g} s)")


class BodyTimeout:
    """408 ``body_timeout`` for a request whose body stalls: no part of it for ``seconds``.

    Only the body is timed: once it has all arrived the request goes on as long as it
    takes (an event stream, a wait).
    """

    def __init__(self, app: ASGIApp, seconds: float) -> None:
        self.app = app
        self.seconds = seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        done = False
        started = False

        async def timed() -> Message:
            nonlocal done
            if done:
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), self.seconds)
            except TimeoutError:
                raise _Stalled(self.seconds) from None
            if message["type"] != "http.request" or not message.get("more_body", False):
                done = True
            return message

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, timed, sending)
        except _Stalled as stalled:  # where no handler of the app answered it
            if not started:
                answer = problem(408, "body_timeout", str(stalled.detail))
                await answer(scope, receive, send)
