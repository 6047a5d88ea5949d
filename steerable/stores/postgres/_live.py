"""Live text deltas across replicas through Postgres ``NOTIFY`` on channel ``steerable_live``.

:class:`PostgresLive` is a :class:`steerable.service.http.LiveFeed`: the holder's replica
publishes each turn's text deltas with ``pg_notify`` (one sender task per process, so they
leave in order, consecutive pieces of one turn merged into one notification), and every
replica listens on one connection of its pool and hands what it hears to its own event
streams. A delta is live only: a notification missed while the listening connection was
down is gone, and the stored message replaces it.

Postgres caps a payload at 8000 bytes: text is sent in pieces well below that.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from steerable.events import Event
from steerable.models.base import TextDelta
from steerable.service.http._live import Delta, Fanout, Subscription

__all__ = ["CHANNEL", "PostgresLive"]

log = logging.getLogger("steerable.stores.postgres")

CHANNEL = "steerable_live"
"""The ``LISTEN`` channel of the deltas; a payload is JSON
``{"s": session, "t": turn, "x": text}``
(the store's session id, the turn's id, the text)."""

PIECE = 1000
"""The most characters of text in one notification: below the 8000-byte cap however escaped."""

BACKLOG = 10_000
"""The deltas waiting to be sent before the oldest are dropped (the database is slow)."""

RETRY = 1.0
"""Seconds between attempts to listen again after the listening connection was lost."""


def _pieces(batch: list[Delta]) -> list[Delta]:
    """``batch`` with consecutive deltas of one turn merged, and cut to at most PIECE chars."""
    merged: list[Delta] = []
    for delta in batch:
        last = merged[-1] if merged else None
        same = last is not None and (last.session, last.turn) == (delta.session, delta.turn)
        if last is not None and same and len(last.text) + len(delta.text) <= PIECE:
            merged[-1] = Delta(last.session, last.turn, last.text + delta.text)
            continue
        merged.append(delta)
    out: list[Delta] = []
    for delta in merged:
        for start in range(0, len(delta.text), PIECE):
            out.append(Delta(delta.session, delta.turn, delta.text[start : start + PIECE]))
    return out


class PostgresLive:
    """Deltas between the replicas of one Postgres database, over the application's pool.

    Enter :meth:`running` once per process (the app's lifespan does): it holds one pooled
    connection for ``LISTEN`` and runs the sender. Outside it deltas reach this process's
    streams only.
    """

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self.fanout = Fanout()
        self._outbox: asyncio.Queue[Delta] | None = None
        self.listening = asyncio.Event()

    def sink(self, session: str, turn: str, event: Event) -> None:
        """Publish a text delta to every replica's streams of ``session``."""
        if not isinstance(event, TextDelta) or not event.text:
            return
        delta = Delta(session, turn, event.text)
        outbox = self._outbox
        if outbox is None:
            self.fanout.deliver(delta)
            return
        if outbox.full():
            outbox.get_nowait()
        outbox.put_nowait(delta)

    def subscribe(self, session: str) -> AbstractAsyncContextManager[Subscription]:
        """The deltas of ``session`` from every replica."""
        return self.fanout.subscribe(session)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[object]:
        """Listen and send while the context lasts."""
        self._outbox = asyncio.Queue(BACKLOG)
        tasks = [
            asyncio.create_task(self._send(self._outbox)),
            asyncio.create_task(self._listen()),
        ]
        try:
            yield self
        finally:
            self._outbox = None
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def _heard(self, connection: Any, pid: int, channel: str, payload: str) -> None:
        try:
            data = json.loads(payload)
            delta = Delta(data["s"], data["t"], data["x"])
        except (ValueError, TypeError, KeyError):
            return  # not one of ours
        if all(isinstance(v, str) for v in (delta.session, delta.turn, delta.text)):
            self.fanout.deliver(delta)

    async def _send(self, outbox: asyncio.Queue[Delta]) -> None:
        while True:
            batch = [await outbox.get()]
            while not outbox.empty():
                batch.append(outbox.get_nowait())
            for delta in _pieces(batch):
                payload = json.dumps(
                    {"s": delta.session, "t": delta.turn, "x": delta.text}, ensure_ascii=False
                )
                try:
                    await self.pool.execute("SELECT pg_notify($1, $2)", CHANNEL, payload)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # live only: a lost delta is replaced by the message
                    log.warning("a live delta was not sent: %s", exc)

    async def _listen(self) -> None:
        while True:
            try:
                await self._listen_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("listening for live deltas failed: %s", exc)
            self.listening.clear()
            await asyncio.sleep(RETRY)

    async def _listen_once(self) -> None:
        async with self.pool.acquire() as connection:
            lost = asyncio.Event()
            await connection.add_listener(CHANNEL, self._heard)
            connection.add_termination_listener(lambda _: lost.set())
            self.listening.set()
            try:
                await lost.wait()
            finally:
                if not lost.is_set():
                    with contextlib.suppress(Exception):
                        await connection.remove_listener(CHANNEL, self._heard)
