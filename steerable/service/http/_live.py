"""Live text deltas for the event streams: a small optional Protocol and its in-process feed.

A replica's :class:`~steerable.service.Service` hands the live events of the turns it runs
to its ``live=`` sink. A :class:`LiveFeed` is where those deltas go and where an event
stream reads them: :class:`LocalLive` within one process (deltas reach the streams of the
holder's replica only), ``steerable.stores.postgres._live.PostgresLive`` through the
database's notifications (deltas reach the streams of every replica). Deltas are live only:
a stream that was not connected misses them, and the stored message replaces them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from steerable.events import Event
from steerable.models.base import TextDelta

__all__ = ["Delta", "LiveFeed", "LocalLive", "Subscription"]

QUEUE = 1000
"""The deltas a slow stream may fall behind by; older ones are dropped (they are live only)."""


@dataclass(frozen=True, slots=True)
class Delta:
    """A piece of a turn's reply text, as the model wrote it (``session`` is the store's id)."""

    session: str
    turn: str
    text: str


class Subscription:
    """The deltas of one session for one stream: a bounded queue that drops the oldest."""

    def __init__(self, session: str) -> None:
        self.session = session
        self._queue: asyncio.Queue[Delta] = asyncio.Queue(QUEUE)

    def put(self, delta: Delta) -> None:
        """Queue ``delta``; a stream too slow to read loses its oldest delta, never blocks."""
        if self._queue.full():
            self._queue.get_nowait()
        self._queue.put_nowait(delta)

    async def get(self, seconds: float) -> Delta | None:
        """The next delta, or None when ``seconds`` pass first."""
        try:
            return await asyncio.wait_for(self._queue.get(), seconds)
        except TimeoutError:
            return None


@runtime_checkable
class LiveFeed(Protocol):
    """Where live deltas are published (by the holder's replica) and read (by streams)."""

    def sink(self, session: str, turn: str, event: Event) -> None:
        """The ``live=`` sink of a :class:`~steerable.service.Service`: publishes text deltas."""
        ...

    def subscribe(self, session: str) -> AbstractAsyncContextManager[Subscription]:
        """The deltas of ``session`` (a store id) from now until the context is left."""
        ...

    def running(self) -> AbstractAsyncContextManager[object]:
        """What the feed needs while the app runs (a listening connection); entered once."""
        ...


class Fanout:
    """The subscriptions of one process, by session: what every feed delivers into."""

    def __init__(self) -> None:
        self.streams: dict[str, set[Subscription]] = {}

    def deliver(self, delta: Delta) -> None:
        """Hand ``delta`` to every subscription of its session."""
        for subscription in self.streams.get(delta.session, ()):
            subscription.put(delta)

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


class LocalLive:
    """Deltas within this process: a stream sees the turns this replica runs."""

    def __init__(self) -> None:
        self.fanout = Fanout()

    def sink(self, session: str, turn: str, event: Event) -> None:
        """Deliver a text delta to this process's streams of ``session``."""
        if isinstance(event, TextDelta) and event.text:
            self.fanout.deliver(Delta(session, turn, event.text))

    def subscribe(self, session: str) -> AbstractAsyncContextManager[Subscription]:
        """The deltas of ``session`` from this process."""
        return self.fanout.subscribe(session)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[object]:
        """Nothing to run."""
        yield self
