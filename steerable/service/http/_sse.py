"""The event stream of a session, as Server-Sent Events, resumable on any replica.

Durable events come from the store with the ids every replica reads alike, so a client that
reconnects anywhere with ``Last-Event-ID: n`` gets every event after ``n`` once, in order.
The stream polls the store for them (backing off while nothing happens, at once again when
a delta shows a turn is writing) and interleaves the live deltas of :class:`LiveFeed`,
which carry no id: they are never replayed. A comment line keeps idle connections open.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator

from steerable.errors import StoreUnavailable
from steerable.service import Service
from steerable.service._service import MAX_PAGE
from steerable.service.http._live import Delta, LiveFeed
from steerable.service.http._models import event_out
from steerable.service_store import ServiceEvent

__all__ = ["delta_frame", "event_frame", "last_event", "stream", "unavailable_frame"]

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
) -> AsyncIterator[str]:
    """The frames of ``session``'s stream after event ``after``, until the client leaves.

    A store that fails ends the stream cleanly: one ``unavailable`` frame (with ``retry``:
    reconnect in a second, with ``Last-Event-ID``) and one line in the log, rather than an
    answer cut in the middle and the server's traceback ("response already started").
    """
    frames = _frames(service, live, session, after, keepalive=keepalive, poll=poll)
    try:
        async for frame in frames:
            yield frame
    except StoreUnavailable as exc:
        log.warning("an event stream of %r ended: the store is unavailable: %s", session, exc)
        yield unavailable_frame()
    finally:
        await frames.aclose()


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
) -> AsyncGenerator[str, None]:
    async with live.subscribe(session) as deltas:
        if await beyond(service, session, after):
            after = await last_event(service, session)
            yield refetch_frame(after)
        pause = FIRST_POLL
        quiet_since = time.monotonic()
        while True:
            events = await service.events(session, after=after, limit=MAX_PAGE)
            for event in events:
                yield event_frame(event)
                after = event.id
            if events:
                pause, quiet_since = FIRST_POLL, time.monotonic()
                if len(events) == MAX_PAGE:
                    continue
            deadline = time.monotonic() + pause
            caught_up = False
            while (left := deadline - time.monotonic()) > 0:
                silent = quiet_since + keepalive - time.monotonic()
                if silent <= 0:
                    yield ": keep-alive\n\n"
                    quiet_since = time.monotonic()
                    continue
                delta = await deltas.get(min(left, silent))
                if delta is not None:
                    if not caught_up:
                        # the first delta of a reply follows what its step stored (the tool
                        # results, the steers taken): send those first, in their order
                        for event in await service.events(session, after=after, limit=MAX_PAGE):
                            yield event_frame(event)
                            after = event.id
                        caught_up = True
                    yield delta_frame(delta)
                    quiet_since = time.monotonic()
                    pause = FIRST_POLL  # a turn is writing: its events come soon
            pause = min(pause * 2, poll)
