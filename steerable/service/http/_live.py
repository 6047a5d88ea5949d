"""Live events for the event streams: a small optional Protocol and its in-process feed.

A replica's :class:`~steerable.service.Service` hands the live events of the turns it runs
to its ``live=`` sink. A :class:`LiveFeed` is where those go, as a :class:`Delta` (a piece
of reply text) or a :class:`LiveTool` (a tool call starting or ending), and where an event
stream reads them: :class:`LocalLive` within one process (they reach the streams of the
holder's replica only), ``steerable.stores.postgres._live.PostgresLive`` through the
database's notifications (they reach the streams of every replica). They are live only:
a stream that was not connected misses them, and the stored messages replace them.

A delta with no text is a *wake*: durable events were just written to the session, so its
streams read the store now rather than at their next poll. A feed's ``wake(session)`` sends
one (to every replica's streams, where the feed reaches them); the app gives it to its
Service (``Service(wake=)``), which calls it after each write of this process.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Literal, Protocol, TypeAlias, runtime_checkable

from steerable.events import Ended, Event, Saved, ToolEnded, ToolStarted
from steerable.models.base import TextDelta

__all__ = [
    "Delta",
    "Live",
    "LiveFeed",
    "LiveTool",
    "LocalLive",
    "Positions",
    "Subscription",
    "Waking",
    "is_wake",
]

QUEUE = 1000
"""The live events a slow stream may fall behind by; older ones are dropped (live only)."""

CAP = 2000
"""The most characters of a tool call's arguments or result a :class:`LiveTool` carries:
small enough for a Postgres notification; the stored transcript has the whole text."""


@dataclass(frozen=True, slots=True)
class Delta:
    """A piece of a turn's reply text, as the model wrote it (``session`` is the store's id).

    ``after`` is the transcript's length when the model was asked (the reply is stored from
    that position on), where the feed knows it: an event stream sends the delta after every
    event stored before that and before any stored after it. No text: a wake.
    """

    session: str
    turn: str
    text: str
    after: int | None = None


@dataclass(frozen=True, slots=True)
class LiveTool:
    """A tool call of a turn starting (``phase`` ``"started"``) or ending (``"ended"``).

    ``call`` and ``name`` are the call's id and tool; ``text`` its arguments (JSON text, as
    the model wrote them) when it starts, its result when it ends, where ``error`` says
    whether the tool failed. ``text`` is at most :data:`CAP` characters, ``truncated`` when
    it was cut. ``session`` and ``after`` as in :class:`Delta`.
    """

    session: str
    turn: str
    phase: Literal["started", "ended"]
    call: str
    name: str
    text: str
    error: bool = False
    truncated: bool = False
    after: int | None = None


Live: TypeAlias = Delta | LiveTool
"""What a feed carries: a text delta (with no text, a wake) or a tool call's start or end."""


def is_wake(item: Live) -> bool:
    """Whether ``item`` is a wake (a delta with no text), not a live event to send."""
    return isinstance(item, Delta) and not item.text


class Subscription:
    """The live events of one session for one stream: a bounded queue that drops the oldest."""

    def __init__(self, session: str) -> None:
        self.session = session
        self._queue: deque[Live] = deque()
        self._ready = asyncio.Event()
        self._woken = False  # a wake waits in the queue: another adds nothing

    def put(self, item: Live) -> None:
        """Queue ``item``; a stream too slow to read loses its oldest one, never blocks."""
        if is_wake(item):
            if self._woken:
                return
            self._woken = True
        if len(self._queue) >= QUEUE:
            self._drop(self._queue.popleft())
        self._queue.append(item)
        self._ready.set()

    def _drop(self, item: Live) -> None:
        if is_wake(item):
            self._woken = False

    def peek(self) -> Live | None:
        """The first live event waiting, left in the queue (None if none)."""
        return self._queue[0] if self._queue else None

    def pop(self) -> Live | None:
        """The first live event waiting, taken (None if none)."""
        if not self._queue:
            return None
        item = self._queue.popleft()
        self._drop(item)
        if not self._queue:
            self._ready.clear()
        return item

    async def wait(self, seconds: float) -> bool:
        """Whether a live event waits, once one does or ``seconds`` have passed."""
        if not self._queue:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(seconds):  # not wait_for: see _replica.waited
                    await self._ready.wait()
        return bool(self._queue)

    async def get(self, seconds: float) -> Live | None:
        """The next live event (or wake), or None when ``seconds`` pass first."""
        return self.pop() if await self.wait(seconds) else None


@runtime_checkable
class LiveFeed(Protocol):
    """Where live events are published (by the holder's replica) and read (by streams)."""

    def sink(self, session: str, turn: str, event: Event) -> None:
        """The ``live=`` sink of a :class:`~steerable.service.Service`: publishes text
        deltas and tool calls' starts and ends."""
        ...

    def subscribe(self, session: str) -> AbstractAsyncContextManager[Subscription]:
        """The live events of ``session`` (a store id) from now until the context is left."""
        ...

    def running(self) -> AbstractAsyncContextManager[object]:
        """What the feed needs while the app runs (a listening connection); entered once."""
        ...


@runtime_checkable
class Waking(Protocol):
    """A feed that can wake the streams of a session (on every replica it reaches)."""

    def wake(self, session: str) -> None:
        """Tell ``session``'s streams that durable events were written: read them now."""
        ...


class Fanout:
    """The subscriptions of one process, by session: what every feed delivers into."""

    def __init__(self) -> None:
        self.streams: dict[str, set[Subscription]] = {}

    def deliver(self, item: Live) -> None:
        """Hand ``item`` to every subscription of its session."""
        for subscription in self.streams.get(item.session, ()):
            subscription.put(item)

    @asynccontextmanager
    async def subscribe(self, session: str) -> AsyncIterator[Subscription]:
        """A subscription to ``session``, removed when the context is left."""
        subscription = Subscription(session)
        self.streams.setdefault(session, set()).add(subscription)
        try:
            yield subscription
        finally:
            mine = self.streams.get(session)
            if mine is not None:
                mine.discard(subscription)
                if not mine:
                    del self.streams[session]

    def count(self) -> int:
        """How many subscriptions are open (tests check that a closed stream leaves none)."""
        return sum(len(s) for s in self.streams.values())


def _capped(text: str) -> tuple[str, bool]:
    """``text`` cut to :data:`CAP` characters, and whether it was cut."""
    return (text[:CAP], True) if len(text) > CAP else (text, False)


class Positions:
    """Where each running turn's reply goes: the transcript length of its last save."""

    def __init__(self) -> None:
        self._stored: dict[tuple[str, str], int] = {}

    def live(self, session: str, turn: str, event: Event) -> Live | None:
        """The live event ``event`` makes (None for no text and other kinds), noting saves
        and ends."""
        key = (session, turn)
        after = self._stored.get(key)
        if isinstance(event, TextDelta):
            return Delta(session, turn, event.text, after) if event.text else None
        if isinstance(event, ToolStarted):
            call = event.call
            text, cut = _capped(call.arguments)
            return LiveTool(session, turn, "started", call.id, call.name, text, False, cut, after)
        if isinstance(event, ToolEnded):  # a replayed result too: the console shows it
            call, result = event.call, event.result
            text, cut = _capped(result.content)
            error = result.is_error
            return LiveTool(session, turn, "ended", call.id, call.name, text, error, cut, after)
        if isinstance(event, Saved):
            self._stored[key] = event.stored
        elif isinstance(event, Ended):
            self._stored.pop(key, None)
        return None


class LocalLive:
    """Live events within this process: a stream sees the turns this replica runs."""

    def __init__(self) -> None:
        self.fanout = Fanout()
        self._positions = Positions()

    def sink(self, session: str, turn: str, event: Event) -> None:
        """Deliver a text delta or a tool call's start or end to this process's streams."""
        item = self._positions.live(session, turn, event)
        if item is not None:
            self.fanout.deliver(item)

    def wake(self, session: str) -> None:
        """Wake this process's streams of ``session``."""
        self.fanout.deliver(Delta(session, "", ""))

    def subscribe(self, session: str) -> AbstractAsyncContextManager[Subscription]:
        """The live events of ``session`` from this process."""
        return self.fanout.subscribe(session)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[object]:
        """Nothing to run."""
        yield self
