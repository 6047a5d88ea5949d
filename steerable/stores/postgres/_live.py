"""Live events across replicas through Postgres ``NOTIFY`` on channel ``steerable_live``.

:class:`PostgresLive` is a :class:`steerable.service.http.LiveFeed`: the holder's replica
publishes each turn's text deltas and tool calls' starts and ends with ``pg_notify`` (one
sender task per process, so they leave in order, consecutive text pieces of one turn merged
into one notification), and every replica listens on one connection of its pool and hands
what it hears to its own event streams. They are live only: a notification missed while the
listening connection was down is gone, and the stored messages replace it.

Postgres caps a payload below 8000 bytes: text is sent in pieces well below that, and a tool
call's text (at most ``CAP`` characters, up to six bytes each once escaped) is cut further
when its payload would not fit.
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
from steerable.service.http._live import (
    Delta,
    Fanout,
    Live,
    LiveTool,
    Positions,
    Subscription,
)
from steerable.stores.postgres._reset import mark_for_reset, unmark

__all__ = ["CHANNEL", "PostgresLive"]

log = logging.getLogger("steerable.stores.postgres")

CHANNEL = "steerable_live"
"""The ``LISTEN`` channel of the live events; a delta's payload is JSON
``{"s": session, "t": turn, "x": text, "a": after}``
(the store's session id, the turn's id, the text, where its reply is stored; no text: a
wake, see ``_live``'s docs); a tool call's is
``{"k": "tool", "s", "t", "a", "p": phase, "c": call id, "n": name, "v": text, "e": error,
"u": truncated}``, with no ``"x"``, so a replica that knows only deltas ignores it."""

PIECE = 1000
"""The most characters of text in one notification: below the 8000-byte cap however escaped."""

PAYLOAD = 7900
"""The most bytes of a payload we send: below Postgres's cap of 8000, with room to spare."""

BACKLOG = 10_000
"""The live events waiting to be sent before the oldest are dropped (the database is slow)."""

RETRY = 1.0
"""Seconds between attempts to listen again after the listening connection was lost."""


def _pieces(batch: list[Live]) -> list[Live]:
    """``batch`` with consecutive deltas of one turn merged, and cut to at most PIECE chars
    (a tool call's start or end goes as it is, in its place)."""
    merged: list[Live] = []
    for delta in batch:
        last = merged[-1] if merged else None
        if (
            isinstance(last, Delta)
            and isinstance(delta, Delta)
            and (last.session, last.turn, last.after) == (delta.session, delta.turn, delta.after)
            and bool(last.text)
            and bool(delta.text)
            and len(last.text) + len(delta.text) <= PIECE
        ):
            merged[-1] = Delta(last.session, last.turn, last.text + delta.text, last.after)
            continue
        merged.append(delta)
    out: list[Live] = []
    woken: set[str] = set()
    for delta in merged:
        if isinstance(delta, LiveTool):
            out.append(delta)
            continue
        if not delta.text:  # a wake: one per session a batch
            if delta.session not in woken:
                woken.add(delta.session)
                out.append(delta)
            continue
        for start in range(0, len(delta.text), PIECE):
            piece = delta.text[start : start + PIECE]
            out.append(Delta(delta.session, delta.turn, piece, delta.after))
    return out


def _payload(item: Live) -> str | None:
    """The notification of ``item``, or None when even a tool call's empty text would not
    fit (a call id or name of kilobytes: the stored step shows it)."""
    if isinstance(item, Delta):
        fields = {"s": item.session, "t": item.turn, "x": item.text, "a": item.after}
        return json.dumps(fields, ensure_ascii=False)
    text, truncated = item.text, item.truncated
    while True:
        fields = {"k": "tool", "s": item.session, "t": item.turn, "a": item.after}
        fields |= {"p": item.phase, "c": item.call, "n": item.name, "v": text}
        payload = json.dumps({**fields, "e": item.error, "u": truncated}, ensure_ascii=False)
        excess = len(payload.encode(errors="surrogatepass")) - PAYLOAD  # never raises
        if excess <= 0:
            return payload
        if not text:
            return None
        # each character is at least one byte: cutting ``excess`` of them is enough
        text, truncated = text[: max(0, len(text) - excess)], True


def _heard_item(payload: str) -> Live | None:
    """The live event a notification carries (None: not one of ours)."""
    try:
        data = json.loads(payload)
        if data.get("k") == "tool":
            item: Live = LiveTool(
                *(data["s"], data["t"], data["p"], data["c"], data["n"], data["v"]),
                error=data["e"],
                truncated=data["u"],
                after=data.get("a"),
            )
        else:
            item = Delta(data["s"], data["t"], data["x"], data.get("a"))
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    if item.after is not None and type(item.after) is not int:
        return None
    if isinstance(item, Delta):
        texts = (item.session, item.turn, item.text)
        return item if all(isinstance(v, str) for v in texts) else None
    names = (item.session, item.turn, item.call, item.name, item.text)
    flags = (item.error, item.truncated)
    fine = item.phase in ("started", "ended") and all(type(v) is bool for v in flags)
    return item if fine and all(isinstance(v, str) for v in names) else None


class PostgresLive:
    """Live events between the replicas of one Postgres database, over the application's pool.

    Enter :meth:`running` once per process (the app's lifespan does): it holds one pooled
    connection for ``LISTEN`` and runs the sender. Outside it live events reach this
    process's streams only.
    """

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self.fanout = Fanout()
        self._positions = Positions()
        self._outbox: asyncio.Queue[Live] | None = None
        self.listening = asyncio.Event()

    def sink(self, session: str, turn: str, event: Event) -> None:
        """Publish a text delta or a tool call's start or end to every replica's streams."""
        item = self._positions.live(session, turn, event)
        if item is not None:
            self._publish(item)

    def wake(self, session: str) -> None:
        """Wake every replica's streams of ``session``: its durable events were written."""
        self._publish(Delta(session, "", ""))

    def _publish(self, item: Live) -> None:
        outbox = self._outbox
        if outbox is None:
            self.fanout.deliver(item)
            return
        if outbox.full():
            outbox.get_nowait()
        outbox.put_nowait(item)

    def subscribe(self, session: str) -> AbstractAsyncContextManager[Subscription]:
        """The live events of ``session`` from every replica."""
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
        item = _heard_item(payload)
        if item is not None:
            self.fanout.deliver(item)

    async def _send(self, outbox: asyncio.Queue[Live]) -> None:
        while True:
            batch = [await outbox.get()]
            while not outbox.empty():
                batch.append(outbox.get_nowait())
            for item in _pieces(batch):
                payload = _payload(item)
                if payload is None:
                    log.warning("a live tool event of session %r was too big to send", item.session)
                    continue
                try:
                    await self.pool.execute("SELECT pg_notify($1, $2)", CHANNEL, payload)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # live only: a lost one is replaced by the message
                    log.warning("a live event was not sent: %s", exc)

    async def _listen(self) -> None:
        while True:
            try:
                await self._listen_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("listening for live events failed: %s", exc)
            self.listening.clear()
            await asyncio.sleep(RETRY)

    async def _listen_once(self) -> None:
        async with self.pool.acquire() as connection:
            lost = asyncio.Event()

            def gone(_: Any) -> None:
                lost.set()

            mark_for_reset(connection)  # until UNLISTEN has run (see ._reset)
            await connection.add_listener(CHANNEL, self._heard)
            connection.add_termination_listener(gone)
            self.listening.set()
            try:
                await lost.wait()
            finally:
                if not lost.is_set():
                    connection.remove_termination_listener(gone)
                    with contextlib.suppress(Exception):
                        await connection.remove_listener(CHANNEL, self._heard)
                        unmark(connection)
