"""The Postgres store's hints (:class:`steerable.service_store.Notifying`): ``LISTEN``/``NOTIFY``.

Writes that make work claimable (an input while no turn runs, a turn's end with an input
waiting) and ``stop`` call ``pg_notify`` on the channel ``steerable`` inside their statement
(:func:`._statements.hint`), delivered when it commits; :meth:`PostgresHints.hints` listens
on one connection of the pool.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from steerable.errors import StoreUnavailable, UsageError
from steerable.service_store import Hint
from steerable.stores.postgres._reset import mark_for_reset, unmark
from steerable.stores.postgres._statements import CHANNEL, Statements
from steerable.stores.postgres._translate import translated

__all__ = ["PostgresHints"]


class PostgresHints(Statements):
    """The ``hints`` of :class:`PostgresStore`, heard on one connection of its pool."""

    __slots__ = ()

    @asynccontextmanager
    async def hints(self) -> AsyncIterator[AsyncIterator[Hint]]:
        """Hints of work and stops from every replica, over one connection of the pool.

        The connection is the pool's for as long as the context lasts (``LISTEN`` needs one
        connection of its own), and goes back when it is left. A hint is sent when the
        write that causes it commits. If that connection is lost the iterator raises
        :class:`StoreUnavailable`: enter the context again (hints are never the source of
        truth; the poll finds what was missed meanwhile).
        """
        await self._check_once()
        acquire = getattr(self.pool, "acquire", None)
        if acquire is None:
            raise UsageError("hints need an asyncpg pool: LISTEN holds a connection of its own")
        listener = _Listener()
        async with AsyncExitStack() as stack:
            with translated("listen for hints"):
                connection = await stack.enter_async_context(acquire())
                mark_for_reset(connection)  # until UNLISTEN has run (see ._reset)
                await connection.add_listener(CHANNEL, listener.heard)
            connection.add_termination_listener(listener.lost)
            try:
                yield listener
            finally:
                listener.close()
                if not listener.lost_connection:  # a lost one has left the pool by itself
                    connection.remove_termination_listener(listener.lost)
                    with translated("stop listening for hints"):
                        await connection.remove_listener(CHANNEL, listener.heard)
                    unmark(connection)


class _Listener:
    """The hints heard on a connection, as an async iterator."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[Hint | None] = asyncio.Queue()
        self.lost_connection = False
        self._closed = False

    def heard(self, connection: Any, pid: int, channel: str, payload: str) -> None:
        """asyncpg's callback for a notification on the channel."""
        try:
            data = json.loads(payload)
            hint = Hint(data["kind"], data["session"])
        except (ValueError, TypeError, KeyError):
            return  # not one of ours: somebody else notifies on the channel
        if hint.kind in ("work", "stop") and isinstance(hint.session, str):
            self._queue.put_nowait(hint)

    def lost(self, connection: Any) -> None:
        """asyncpg's callback when the connection closes."""
        self.lost_connection = True
        self._queue.put_nowait(None)

    def close(self) -> None:
        """The context was left: the iterator ends."""
        self._closed = True
        self._queue.put_nowait(None)

    def __aiter__(self) -> _Listener:
        return self

    async def __anext__(self) -> Hint:
        if self._closed:
            raise StopAsyncIteration
        hint = await self._queue.get()
        if hint is not None:
            return hint
        if self.lost_connection and not self._closed:
            raise StoreUnavailable("the Postgres connection that listened for hints was lost")
        raise StopAsyncIteration
