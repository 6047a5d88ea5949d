"""The Postgres store's :class:`~steerable.store.Forkable` verb: a session started from
another's transcript, through a message.

A fork is one READ COMMITTED transaction on one connection of the pool (whatever the pool's
default isolation) of two statements, so four round trips with its ``BEGIN`` and
``COMMIT`` however long the transcript:

1. The new session's row of ``steerable_sessions`` is made if missing, or locked ``FOR
   UPDATE`` with its ``version`` grown, in one upsert. A session's first input makes that
   row too, and every service write (an enqueue, a claim) locks it; so forks into one id
   queue on it, one after the other, and an enqueue or a claim of the new session waits
   for the fork, then (its ``version`` changed) runs again and reads the copied transcript.
   Without it, a claim that read the new session before the copy committed could start a
   turn at position 0 of a transcript that is about to hold the copies.
2. One statement, on a snapshot taken after that lock: it finds ``through`` on the
   transcript's id key, checks that the new session has nothing (no message, no steer ever
   left, no input, no metadata), copies the messages through it with ``INSERT ... SELECT``
   (the database server copies the rows, ids, bodies and stored times; nothing comes back
   to Python) and removes the row of step 1 again when the fork made it and left it empty,
   so a fork, like a core save, leaves the service no row. Refused, the transaction rolls
   back whole. A core save into the new session does not take the row's lock; it and the
   copy meet on the transcript's keys, and the one that commits second fails (here:
   :class:`~steerable.errors.SessionExists`).

The source is only read, in that one snapshot: a save, cut or delete of it that commits
meanwhile is after the fork or before it, never half seen. The copy costs one row per
message, written by the server (no structural sharing: a later write to either session
never shows in the other).
"""

from __future__ import annotations

from typing import Any

import asyncpg  # type: ignore[import-untyped]

from steerable.errors import MessageNotFound, SessionExists, StoreUnavailable
from steerable.stores.postgres._schema import NEW_MARK
from steerable.stores.postgres._statements import RETRIES, acquired
from steerable.stores.postgres._translate import translated

__all__ = ["PostgresForkable"]

_HOLD = f"""
INSERT INTO steerable_sessions AS s (session) VALUES ($1)
ON CONFLICT (session) DO UPDATE SET version = s.version + 1, mark = {NEW_MARK}
"""

# $1 the session forked, $2 the new one, $3 the message it is forked through (NULL: all).
# `last` is the last position copied (NULL: none, or `through` is not in the transcript);
# the copy and the removal of an unmade row run only for a fork that is not refused.
_FORK = """
WITH last AS (
    SELECT CASE WHEN $3::text IS NULL
        THEN (SELECT max(position) FROM steerable_messages WHERE session = $1)
        ELSE (SELECT position FROM steerable_messages WHERE session = $1 AND id = $3::text)
    END AS position
), found AS (
    SELECT $3::text IS NULL OR position IS NOT NULL AS yes FROM last
), taken AS (
    SELECT EXISTS (SELECT FROM steerable_messages WHERE session = $2)
        OR EXISTS (SELECT FROM steerable_steers WHERE session = $2)
        OR EXISTS (SELECT FROM steerable_inputs WHERE session = $2)
        OR EXISTS (
            SELECT FROM steerable_sessions WHERE session = $2 AND metadata IS NOT NULL
        ) AS yes
), go AS (
    SELECT found.yes AND NOT taken.yes AS yes FROM found, taken
), copied AS (
    INSERT INTO steerable_messages (session, position, id, body, at)
    SELECT $2, m.position, m.id, m.body, m.at FROM steerable_messages m
    WHERE m.session = $1 AND m.position <= (SELECT position FROM last)
        AND (SELECT yes FROM go)
    ORDER BY m.position
    RETURNING 1
), unmade AS (
    DELETE FROM steerable_sessions
    WHERE session = $2 AND epoch = 0 AND events = 0 AND inputs = 0 AND metadata IS NULL
        AND (SELECT yes FROM go)
)
SELECT found.yes AS found, taken.yes AS taken, (SELECT count(*) FROM copied) AS copied
FROM found, taken
"""


class PostgresForkable:
    """The :class:`steerable.store.Forkable` verb of :class:`PostgresStore`."""

    __slots__ = ()

    pool: Any  # the store's pool (see PostgresStore)

    async def _check_once(self) -> None:
        raise NotImplementedError  # provided by PostgresStore

    async def fork(self, session: str, new: str, *, through: str | None = None) -> int:
        """Start ``new`` with ``session``'s transcript through message ``through`` (all of it
        when None); how many messages it copied.

        One transaction; refused whole with :class:`MessageNotFound` when ``through`` is not
        in the transcript, :class:`SessionExists` when ``new`` has messages, steers, inputs
        or metadata (or gets them while the fork runs).
        """
        await self._check_once()
        doing = f"fork session {session!r} into {new!r}"
        for _ in range(RETRIES):
            with translated(doing):
                try:
                    async with (
                        acquired(self.pool, doing) as connection,
                        connection.transaction(isolation="read_committed"),
                    ):
                        await connection.execute(_HOLD, new)
                        row = await connection.fetchrow(_FORK, session, new, through)
                        if through is not None and not row["found"]:
                            raise MessageNotFound(session, through)
                        if row["taken"]:
                            raise SessionExists(new)
                        copied: int = row["copied"]
                        return copied
                except asyncpg.UniqueViolationError:
                    # a save into `new` committed while the copy waited on its key
                    raise SessionExists(new) from None
                except asyncpg.DeadlockDetectedError:
                    continue  # rolled back whole: run it again
        raise StoreUnavailable(f"cannot {doing}: it deadlocked in each of {RETRIES} attempts")
