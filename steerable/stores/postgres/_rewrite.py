"""The Postgres store's :class:`~steerable.store.Rewritable` verbs: cut, and delete a session.

Each verb is one READ COMMITTED transaction on one connection of the pool (whatever the
pool's default isolation), a few statements long; they are rare, so they trade the one
statement of the other verbs for plain steps, in this order:

1. The session's row of ``steerable_sessions`` is made if missing and locked ``FOR
   UPDATE``: every service write and claim of the session queues behind it, so the check
   that no turn is running holds until the commit. Its ``version`` grows, so a claim that
   waited on the lock runs again on a fresh snapshot and reads the transcript as it is now.
   A row the verb made and left empty (no epoch, no event) is removed again before the
   commit, so cutting or deleting a session the service never saw leaves no row.
2. The transcript's last message is locked ``FOR UPDATE``, again until its position is the
   transcript's end in a fresh read. A core save locks the message before its position
   ``FOR KEY SHARE`` (see :mod:`._store`), so once the last one is held no save can append,
   and one that waited finds it gone and runs again: a cut's length check and its delete see
   the whole transcript, and a delete leaves no message of a save that raced it.
3. A delete removes the steers first, then the messages (a take into an empty transcript
   holds its steers' locks until it commits, so its message is then there to remove), then
   the service's inputs, turns and events; the session's row keeps its epoch and its events
   counter, so a stale holder stays fenced and event ids go on after the old ones.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import asyncpg  # type: ignore[import-untyped]

from steerable import codec
from steerable.errors import SessionBusy, StoreUnavailable, TranscriptConflict, UsageError
from steerable.messages import Message
from steerable.stores.postgres._translate import translated

__all__ = ["PostgresRewritable"]

_T = TypeVar("_T")

_MAX = 2**63 - 1  # bigint: no transcript is longer, so a larger position cuts nothing

_MAKE = "INSERT INTO steerable_sessions (session) VALUES ($1) ON CONFLICT DO NOTHING"

_LOCK = """
UPDATE steerable_sessions SET version = version + 1 WHERE session = $1 RETURNING running
"""

_TAIL = """
SELECT position FROM steerable_messages WHERE session = $1
ORDER BY position DESC LIMIT 1 FOR UPDATE
"""

_LENGTH = "SELECT coalesce(max(position) + 1, 0) FROM steerable_messages WHERE session = $1"

_CUT = """
DELETE FROM steerable_messages WHERE session = $1 AND position >= $2 RETURNING position, id, body
"""

_STEERS = "DELETE FROM steerable_steers WHERE session = $1"

# Everything else of the session, in one statement; its row keeps epoch and events.
_FORGET = """
WITH messages AS (
    DELETE FROM steerable_messages WHERE session = $1 RETURNING 1
), inputs AS (
    DELETE FROM steerable_inputs WHERE session = $1 RETURNING 1
), turns AS (
    DELETE FROM steerable_turns WHERE session = $1
), events AS (
    DELETE FROM steerable_events WHERE session = $1
), reset AS (
    UPDATE steerable_sessions SET holder = NULL, expires = '-infinity', running = NULL,
        inputs = 0, queued = 0
    WHERE session = $1
)
SELECT (SELECT count(*) FROM messages) + (SELECT count(*) FROM inputs)
"""

_UNMADE = """
DELETE FROM steerable_sessions WHERE session = $1 AND epoch = 0 AND events = 0 AND inputs = 0
"""

# How often the last message is locked again because a save appended while the verb waited.
_RETRIES = 64


class PostgresRewritable:
    """The :class:`steerable.store.Rewritable` verbs of :class:`PostgresStore`."""

    __slots__ = ()

    pool: Any  # the store's pool (see PostgresStore)

    async def _check_once(self) -> None:
        raise NotImplementedError  # provided by PostgresStore

    async def truncate(self, session: str, *, at: int, length: int | None = None) -> list[Message]:
        """Remove the messages at positions ``at`` and after; returns them, in order.

        With ``length``, :class:`TranscriptConflict` unless exactly ``length`` messages are
        stored; :class:`SessionBusy` while a service turn runs. Either changes nothing.
        """

        async def cut(connection: Any) -> list[Any]:
            stored = await _freeze(connection, session)
            if length is not None and length != stored:
                raise TranscriptConflict(session, length, stored)
            rows: list[Any] = await connection.fetch(_CUT, session, min(at, _MAX))
            return rows

        rows = await self._rewrite(session, "cut", cut)
        return [
            codec.decode(id, body, where=f"session {session!r}, position {position}")
            for position, id, body in sorted(rows)
        ]

    async def delete(self, session: str) -> bool:
        """Forget the session's transcript, steers and service records; True if it had any.

        :class:`SessionBusy` while a service turn runs on it, changing nothing.
        """

        async def forget(connection: Any) -> bool:
            await _freeze(connection, session)
            steers: str = await connection.execute(_STEERS, session)
            found: int = await connection.fetchval(_FORGET, session)
            return found > 0 or steers != "DELETE 0"

        return await self._rewrite(session, "deleted", forget)

    async def _rewrite(self, session: str, what: str, work: Callable[[Any], Awaitable[_T]]) -> _T:
        """``work`` in one transaction that holds the session's row, no turn running on it.

        Run again whole after a deadlock (Postgres rolled it back); the transaction commits
        when ``work`` returns, and rolls back if anything raises.
        """
        await self._check_once()
        doing = f"{'cut' if what == 'cut' else 'delete'} session {session!r}"
        for _ in range(_RETRIES):
            with translated(doing):
                try:
                    async with (
                        self._connection(doing) as connection,
                        connection.transaction(isolation="read_committed"),
                    ):
                        await connection.execute(_MAKE, session)
                        running = await connection.fetchval(_LOCK, session)
                        if running is not None:
                            raise SessionBusy(session, running, what)
                        result = await work(connection)
                        await connection.execute(_UNMADE, session)
                        return result
                except asyncpg.DeadlockDetectedError:
                    continue
        raise StoreUnavailable(f"cannot {doing}: it deadlocked in each of {_RETRIES} attempts")

    @asynccontextmanager
    async def _connection(self, doing: str) -> AsyncIterator[Any]:
        acquire = getattr(self.pool, "acquire", None)
        if acquire is not None:
            async with acquire() as connection:
                yield connection
        elif hasattr(self.pool, "transaction"):
            yield self.pool  # a connection the application gave the store
        else:
            raise UsageError(f"cannot {doing}: it needs an asyncpg pool (or connection)")


async def _freeze(connection: Any, session: str) -> int:
    """Lock the last message so no save can append after it; the transcript's length."""
    for _ in range(_RETRIES):
        last = await connection.fetchval(_TAIL, session)
        stored: int = await connection.fetchval(_LENGTH, session)
        if stored == (0 if last is None else last + 1):
            return stored
    raise StoreUnavailable(
        f"cannot rewrite session {session!r}: it grew under each of {_RETRIES} attempts"
    )
