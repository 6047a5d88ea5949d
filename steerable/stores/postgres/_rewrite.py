"""The Postgres store's :class:`~steerable.store.Rewritable` verbs (cut, and delete a session)
and :class:`~steerable.store.Repairable`'s ``replace`` (a compare-and-swap of the tail).

Each verb is one READ COMMITTED transaction on one connection of the pool (whatever the
pool's default isolation), a few statements long; they are rare, so they trade the one
statement of the other verbs for plain steps, in this order:

1. The session's row of ``steerable_sessions`` is made if missing and locked ``FOR
   UPDATE``: every service write and claim of the session queues behind it, so the check
   that no turn is running (a cut's and a delete's; a replace makes none) holds until the
   commit. Its ``version`` grows, so a claim that
   waited on the lock runs again on a fresh snapshot and reads the transcript as it is now,
   and it gets a new ``mark``, so no claimer takes what it held of the transcript for it.
   A row the verb made and left empty (no epoch, no event) is removed again before the
   commit, so cutting or deleting a session the service never saw leaves no row.
2. The transcript's last message is locked ``FOR UPDATE``, again until its position is the
   transcript's end in a fresh read. A core save locks the message before its position
   ``FOR KEY SHARE`` (see :mod:`._store`), so once the last one is held no save can append,
   and one that waited finds it gone and runs again: a cut's length check and its delete see
   the whole transcript, and a delete leaves no message of a save that raced it.
3. A delete removes the steers first, then the messages (a take into an empty transcript
   holds its steers' locks until it commits, so its message is then there to remove), then
   the service's inputs, turns and events, and the session's metadata; the session's row
   keeps its epoch and its events counter, so a stale holder stays fenced and event ids go
   on after the old ones. (A cut keeps the metadata, and the row that holds it.) The
   delete forgets the session's tool journal in the same statement; a ``begin_calls``
   that commits after that statement's snapshot is as if it came after the delete (the
   journal takes no lock of the session: see :mod:`._journal`), like a steer left then.
4. A replace, the last message held, reads the ids at positions ``at`` and after (the
   transcript's key) and checks whether a new id is one of a message it keeps (the id
   key); only if the tail is ``old`` and none is, it deletes the tail and inserts the new
   messages at ``at``, ``at + 1``, ... (their times the server's ``now()``, as a save's).
   The steer box, inputs, turns and events are not touched. The one race the held message
   cannot see is a save into an empty transcript, which has no message to hold: the two
   meet on the position key, and a replace that loses is a conflict.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import asyncpg  # type: ignore[import-untyped]

from steerable import codec
from steerable.errors import InvalidMessage, SessionBusy, StoreUnavailable, TranscriptConflict
from steerable.messages import Message
from steerable.stores.postgres._schema import NEW_MARK
from steerable.stores.postgres._statements import acquired
from steerable.stores.postgres._translate import translated

__all__ = ["PostgresRewritable"]

_T = TypeVar("_T")

_MAX = 2**63 - 1  # bigint: no transcript is longer, so a larger position cuts nothing

_MAKE = "INSERT INTO steerable_sessions (session) VALUES ($1) ON CONFLICT DO NOTHING"

_LOCK = f"""
UPDATE steerable_sessions SET version = version + 1, mark = {NEW_MARK} WHERE session = $1
RETURNING running
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

# $2 at, $3 the new ids: the ids from `at` on, in order, and whether a new id is one of a
# message before `at` (each on its key: the cost is the tail's, not the transcript's)
_TAIL_IDS = """
SELECT coalesce((
    SELECT array_agg(id ORDER BY position) FROM steerable_messages
    WHERE session = $1 AND position >= $2
), '{}') AS tail, EXISTS (
    SELECT FROM steerable_messages WHERE session = $1 AND id = ANY($3::text[]) AND position < $2
) AS clash
"""

_DROP_TAIL = "DELETE FROM steerable_messages WHERE session = $1 AND position >= $2"

_PUT = """
INSERT INTO steerable_messages (session, position, id, body)
SELECT $1, $2::bigint + m.i - 1, m.id, m.body
FROM unnest($3::text[], $4::text[]) WITH ORDINALITY AS m (id, body, i)
ORDER BY m.i
"""

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
), journal AS (
    DELETE FROM steerable_journal WHERE session = $1
), reset AS (
    UPDATE steerable_sessions SET holder = NULL, expires = '-infinity', running = NULL,
        inputs = 0, queued = 0, metadata = NULL
    WHERE session = $1
)
SELECT (SELECT count(*) FROM messages) + (SELECT count(*) FROM inputs) + (
    SELECT count(*) FROM steerable_sessions WHERE session = $1 AND metadata IS NOT NULL
)
"""

_UNMADE = """
DELETE FROM steerable_sessions
WHERE session = $1 AND epoch = 0 AND events = 0 AND inputs = 0 AND metadata IS NULL
"""

# How often the last message is locked again because a save appended while the verb waited.
_RETRIES = 64


class _Raced(Exception):
    """A save into the empty transcript a replace was writing committed first."""


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
        """Forget the session's transcript, steers, service records and metadata; True if any.

        :class:`SessionBusy` while a service turn runs on it, changing nothing.
        """

        async def forget(connection: Any) -> bool:
            await _freeze(connection, session)
            steers: str = await connection.execute(_STEERS, session)
            found: int = await connection.fetchval(_FORGET, session)
            return found > 0 or steers != "DELETE 0"

        return await self._rewrite(session, "deleted", forget)

    async def replace(
        self, session: str, *, at: int, old: Sequence[str], messages: Sequence[Message]
    ) -> None:
        """Put ``messages`` at positions ``at`` and after, in place of the stored tail, if its
        ids are exactly ``old``; one transaction, not refused while a service turn runs.

        :class:`TranscriptConflict` otherwise, and :class:`InvalidMessage` for a new id
        that is twice in ``messages`` or one of a message before ``at``: nothing written.
        """
        ids = [m.id for m in messages]
        bodies = [codec.encode(m) for m in messages]  # InvalidMessage before any I/O

        async def swap(connection: Any) -> None:
            stored = await _freeze(connection, session)
            if at > stored:
                raise TranscriptConflict(session, at + len(old), stored)
            row = await connection.fetchrow(_TAIL_IDS, session, at, ids)
            if list(row["tail"]) != list(old):
                raise TranscriptConflict(session, at + len(old), stored)
            if row["clash"] or len(set(ids)) != len(ids):
                raise InvalidMessage(
                    f"session {session!r}: a message id is already in the transcript"
                )
            await connection.execute(_DROP_TAIL, session, at)
            try:
                await connection.execute(_PUT, session, at, ids, bodies)
            except asyncpg.UniqueViolationError:
                raise _Raced from None  # see the module docstring, 4.

        try:
            await self._rewrite(session, "replaced", swap)
        except _Raced:
            with translated(f"read the length of session {session!r}"):
                stored: int = await self.pool.fetchval(_LENGTH, session)
            raise TranscriptConflict(session, at + len(old), stored) from None

    async def _rewrite(self, session: str, what: str, work: Callable[[Any], Awaitable[_T]]) -> _T:
        """``work`` in one transaction that holds the session's row (for a cut or a delete,
        with no turn running on it: a replace, ``what`` "replaced", runs beside a turn).

        Run again whole after a deadlock (Postgres rolled it back); the transaction commits
        when ``work`` returns, and rolls back if anything raises.
        """
        await self._check_once()
        verb = {"cut": "cut", "deleted": "delete"}.get(what, "replace the tail of")
        doing = f"{verb} session {session!r}"
        for _ in range(_RETRIES):
            with translated(doing):
                try:
                    async with (
                        acquired(self.pool, doing) as connection,
                        connection.transaction(isolation="read_committed"),
                    ):
                        await connection.execute(_MAKE, session)
                        running = await connection.fetchval(_LOCK, session)
                        if running is not None and what != "replaced":
                            raise SessionBusy(session, running, what)
                        result = await work(connection)
                        await connection.execute(_UNMADE, session)
                        return result
                except asyncpg.DeadlockDetectedError:
                    continue
        raise StoreUnavailable(f"cannot {doing}: it deadlocked in each of {_RETRIES} attempts")


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
