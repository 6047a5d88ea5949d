"""The event stream of a session, as Server-Sent Events, resumable on any replica.

Durable events come from the store with the ids every replica reads alike, so a client that
reconnects anywhere with ``Last-Event-ID: n`` gets every event after ``n`` once, in order.
The stream polls the store for them (backing off while nothing happens, at once again when
a live event shows a turn is working, or a wake that events were written) and interleaves
the live events of :class:`LiveFeed` (text deltas, tool calls' starts and ends), which
carry no id: they are never replayed. A comment
line keeps idle connections open.
"""

from __future__ import annotations

import json
import logging
import time
import weakref
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from contextlib import nullcontext

from fastapi.responses import StreamingResponse

from steerable.errors import StoreUnavailable
from steerable.service import Service
from steerable.service._service import MAX_PAGE
from steerable.service.http._live import Delta, Live, LiveFeed, LiveTool, Subscription, is_wake
from steerable.service.http._models import event_out
from steerable.service_store import ServiceEvent

__all__ = [
    "delta_frame",
    "event_frame",
    "last_event",
    "live_frame",
    "sse_response",
    "stream",
    "tool_frame",
    "unavailable_frame",
]

log = logging.getLogger("steerable.service.http")

RETRY_MS = 1000
"""How long a client waits before it reconnects after an ``unavailable`` frame."""
FIRST_POLL = 0.05
"""The first pause between two reads of the store once nothing new came; it doubles."""


def event_frame(event: ServiceEvent) -> str:
    """One durable event as an SSE frame: one ``data`` line of ASCII-only JSON.

    JSON escapes CR and LF, but not U+2028, U+2029 or U+0085, which many line readers
    (Python's ``str.splitlines`` among them) take for line ends: every non-ASCII character
    is escaped, so no reader can find a line end inside an id or a text.
    """
    data = event_out(event).model_dump_json(ensure_ascii=True)
    return f"id: {event.id}\nevent: {event.kind}\ndata: {data}\n\n"


def delta_frame(delta: Delta) -> str:
    """A live delta as an SSE frame with no id (ASCII-only JSON, as :func:`event_frame`)."""
    data = json.dumps({"turn": delta.turn, "text": delta.text}, ensure_ascii=True)
    return f"event: delta\ndata: {data}\n\n"


def tool_frame(tool: LiveTool) -> str:
    """A tool call's start or end as an SSE frame with no id (ASCII-only JSON)."""
    said: dict[str, object] = (
        {"arguments": tool.text}
        if tool.phase == "started"
        else {"result": tool.text, "error": tool.error}
    )
    fields = {"turn": tool.turn, "phase": tool.phase, "call": tool.call, "name": tool.name}
    data = json.dumps({**fields, **said, "truncated": tool.truncated}, ensure_ascii=True)
    return f"event: tool\ndata: {data}\n\n"


def live_frame(item: Live) -> str:
    """The frame of a live event (not a wake): ``delta`` or ``tool``."""
    return delta_frame(item) if isinstance(item, Delta) else tool_frame(item)


def refetch_frame(last: int) -> str:
    """The frame that tells a client its ``Last-Event-ID`` is beyond the session's events.

    It carries ``id: last`` so a browser's EventSource resumes from there after it.
    """
    return f"id: {last}\nevent: refetch\ndata: {json.dumps({'last': last})}\n\n"


async def last_event(service: Service, session: str) -> int:
    """The id of the session's last durable event (0 for none), a page at a time."""
    after = 0
    while True:
        page = await service.events(session, after=after, limit=MAX_PAGE)
        if not page:
            return after
        after = page[-1].id


async def beyond(service: Service, session: str, after: int) -> bool:
    """Whether event ``after`` does not exist (ids are 1, 2, ... with no gap)."""
    return after > 0 and not await service.events(session, after=after - 1, limit=1)


async def stream(
    service: Service,
    live: LiveFeed,
    session: str,
    after: int,
    *,
    keepalive: float,
    poll: float,
    subscription: Subscription | None = None,
) -> AsyncIterator[str]:
    """The frames of ``session``'s stream after event ``after``, until the client leaves.

    ``subscription``: the live events of ``session`` subscribed to already (by a caller that
    had to be subscribed before it wrote, so as to miss no live event), left open here.

    A store that fails ends the stream cleanly: one ``unavailable`` frame (with ``retry``:
    reconnect in a second, with ``Last-Event-ID``) and one line in the log, rather than an
    answer cut in the middle and the server's traceback ("response already started").
    """
    frames = _frames(
        service, live, session, after, keepalive=keepalive, poll=poll, subscription=subscription
    )
    try:
        async for frame in frames:
            yield frame
    except StoreUnavailable as exc:
        log.warning("an event stream of %r ended: the store is unavailable: %s", session, exc)
        yield unavailable_frame()
    finally:
        await frames.aclose()


def sse_response(
    frames: AsyncIterator[str],
    release: Callable[[], None],
    media_type: str = "text/event-stream",
) -> StreamingResponse:
    """``frames`` as an event stream that calls ``release`` once it ends, however it ends.

    ``release`` gives back the tenant's stream (``Limits.hold_stream``): when the stream
    ends or is cut, and when the response is dropped before its stream ever started.
    """

    async def held() -> AsyncIterator[str]:
        try:
            async for frame in frames:
                yield frame
        finally:
            release()

    body = held()
    weakref.finalize(body, release)  # a stream never started is released too
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(body, media_type=media_type, headers=headers)


def unavailable_frame() -> str:
    """The last frame of a stream the store failed under: reconnect (in ``retry`` ms)."""
    data = {"code": "store_unavailable", "detail": "the store is unavailable; reconnect"}
    return f"retry: {RETRY_MS}\nevent: unavailable\ndata: {json.dumps(data)}\n\n"


async def _frames(
    service: Service,
    live: LiveFeed,
    session: str,
    after: int,
    *,
    keepalive: float,
    poll: float,
    subscription: Subscription | None,
) -> AsyncGenerator[str, None]:
    subscribed = live.subscribe(session) if subscription is None else nullcontext(subscription)
    async with subscribed as deltas:
        if await beyond(service, session, after):
            after = await last_event(service, session)
            yield refetch_frame(after)
        read = after  # the last event read from the store; those not sent yet are held
        held: deque[ServiceEvent] = deque()
        pause = FIRST_POLL
        quiet_since = time.monotonic()
        while True:
            events = await service.events(session, after=read, limit=MAX_PAGE)
            if events:
                held.extend(events)
                read = events[-1].id
                pause, quiet_since = FIRST_POLL, time.monotonic()
            for frame in _release(held, deltas):
                yield frame
                quiet_since = time.monotonic()
            if len(events) == MAX_PAGE:
                continue
            deadline = time.monotonic() + pause
            while (left := deadline - time.monotonic()) > 0:
                silent = quiet_since + keepalive - time.monotonic()
                if silent <= 0:
                    yield ": keep-alive\n\n"
                    quiet_since = time.monotonic()
                    continue
                if not await deltas.wait(min(left, silent)):
                    continue
                first = deltas.peek()
                if first is not None and is_wake(first):  # events were written
                    deltas.pop()
                    pause = FIRST_POLL
                    break
                # a reply is being written or its tools run: what its step stored goes first
                # (read now), and what was stored after the reply waits for it (held)
                pause = FIRST_POLL
                break
            pause = min(pause * 2, poll)


def _release(held: deque[ServiceEvent], deltas: Subscription) -> Iterator[str]:
    """The frames that can go now, in order: the held events before the first waiting live
    event's reply, then that live event, and so on; the events after a waiting reply (or
    its tool calls) stay held."""
    while True:
        item = deltas.peek()
        while item is not None and is_wake(item):  # this read has answered it
            deltas.pop()
            item = deltas.peek()
        while held and (item is None or not _after_reply(held[0], item)):
            yield event_frame(held.popleft())
        if item is None:
            return
        deltas.pop()
        yield live_frame(item)


def _after_reply(event: ServiceEvent, item: Live) -> bool:
    """Whether ``event`` was stored after the reply ``item`` is a piece (or a call) of."""
    if item.after is None or event.turn != item.turn:
        return False
    data = event.data
    if event.kind == "message":
        return bool(data.get("position", -1) >= item.after)
    if event.kind == "step":
        return bool(data.get("length", -1) > item.after)
    return event.kind == "turn_ended"
