"""The Postgres store: every core verb is one SQL statement, a save-and-take included.

A save runs a second statement only when a steer waits (see the comment on ``_SAVE``).
"""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg  # type: ignore[import-untyped]

from steerable import codec
from steerable.errors import InvalidMessage, TranscriptConflict, UsageError
from steerable.messages import Message
from steerable.store import Steer
from steerable.stores.migrations import require
from steerable.stores.postgres._fork import PostgresForkable
from steerable.stores.postgres._journal import PostgresJournal
from steerable.stores.postgres._leases import PostgresLeases
from steerable.stores.postgres._rewrite import PostgresRewritable
from steerable.stores.postgres._schema import MIGRATIONS
from steerable.stores.postgres._statements import Pool
from steerable.stores.postgres._translate import APPLY, translated

__all__ = ["APPLY", "Pool", "PostgresStore", "translated"]

# A save runs `_PLAIN` first: it appends the messages at position $2 (or the end, when $2 is
# NULL) unless a steer waits (and $5 asks for some), one statement, so one implicit
# transaction and one round trip. When one waits it writes nothing and `_SAVE` runs: it
# appends the messages, takes up to $5 waiting steers and appends them right after, one
# statement too. `_PLAIN` is `_SAVE` for a snapshot in which no steer waits (`seen` empty,
# so `moved` is `gone`), and the server runs it in about 60% of the time: each CTE of the
# steers' part costs its plan nodes' start and end even when it finds no row. Every CTE
# reads one snapshot, taken when the statement starts:
# - `stored` is the transcript's length in that snapshot. A pinned save whose `at` differs
#   (behind the store, or past its end) leaves `ok` empty: nothing is taken or written, and
#   the length returned says why. A writer that commits after the snapshot is caught by the
#   (session, position) key: the statement fails whole (a take at the end then retries).
# - `seen` locks the oldest steers waiting in the snapshot. Plain FOR UPDATE, not SKIP
#   LOCKED: two takers of one session append at one position anyway, so skipping ahead
#   gains nothing and would record steers out of order. A row some other taker holds is
#   waited for, and FOR UPDATE then returns it as that taker left it (READ COMMITTED
#   follows a locked row to its newest version). If one of them is taken now, a take
#   committed after the snapshot, and the snapshot's length is stale: `moved` says so, and
#   the statement writes nothing and is run again on a fresh snapshot. (A loser that
#   wrote nothing would otherwise collide with no key and return the stale length as if
#   the transcript were still that long.) A collision on the position key stays the net
#   for every race the locks do not see: a steer is recorded once even if they were wrong.
#   The net has a hole: a pinned save that brings no message and whose steers were all
#   recorded already (a run's own box) marks them taken and writes no row, so no key can
#   collide, and its length may be from before it waited. The statement returns how many
#   it marked; in that case (rare: an id sent again after the run recorded it) a second
#   query reads the length, and a save that was overtaken is a conflict. Marking a
#   recorded steer taken changes no transcript: its record answered it already.
# - `prior` locks the message before the new ones FOR KEY SHARE (a save of many does not
#   block another), which a cut or a delete locks FOR UPDATE before it removes it (see
#   ._rewrite). One that removed it while this waited leaves `prior` empty: `gone`, and the
#   statement writes nothing and runs again, like `moved`, so no save appends after a
#   message a cut or delete has removed (and no cut misses a message appended meanwhile).
#   `seen` waits for it (it reads `gone`), so the locks are taken in one order: the message,
#   then the steers.
# - The main query reads `took` before `written` runs (an unreferenced data-modifying CTE
#   runs last), so every steer lock is held before any message row is inserted, and rows
#   go in by ascending position: two savers cannot deadlock on each other's rows.
# - `waiting` (`_PLAIN`'s) reads the partial index of waiting steers. A steer some taker
#   holds is still waiting in the snapshot, so the race for it is `_SAVE`'s as above; one
#   that comes after the snapshot is left for the next save, as `_SAVE` leaves it.
_PLACE = """
WITH stored AS (
    SELECT coalesce(max(position) + 1, 0) AS n FROM steerable_messages WHERE session = $1
), ok AS (
    SELECT n FROM stored WHERE $2::bigint IS NULL OR n = $2::bigint
), prior AS (
    SELECT position FROM steerable_messages
    WHERE session = $1 AND position = (SELECT n FROM ok) - 1
    FOR KEY SHARE
), gone AS (
    SELECT EXISTS (SELECT FROM ok WHERE n > 0) AND NOT EXISTS (SELECT FROM prior) AS yes
)"""

_PLAIN = f"""{_PLACE}, waiting AS (
    SELECT $5::int > 0 AND EXISTS (SELECT FROM ok) AND EXISTS (
        SELECT FROM steerable_steers WHERE session = $1 AND NOT taken
    ) AS yes
), written AS (
    INSERT INTO steerable_messages (session, position, id, body)
    SELECT $1, ok.n + m.i - 1, m.id, m.body
    FROM ok, unnest($3::text[], $4::text[]) WITH ORDINALITY AS m (id, body, i)
    WHERE NOT (SELECT yes FROM gone) AND NOT (SELECT yes FROM waiting)
    ORDER BY m.i
)
SELECT stored.n, gone.yes, waiting.yes FROM stored, gone, waiting
"""

_SAVE = f"""{_PLACE}, seen AS (
    SELECT seq, taken FROM steerable_steers
    WHERE seq IN (
        SELECT seq FROM steerable_steers
        WHERE session = $1 AND NOT taken AND EXISTS (SELECT FROM ok)
            AND NOT (SELECT yes FROM gone)
        ORDER BY seq
        LIMIT $5
    )
    ORDER BY seq
    FOR UPDATE
), moved AS (
    SELECT EXISTS (SELECT FROM seen WHERE taken) OR (SELECT yes FROM gone) AS yes
), took AS (
    UPDATE steerable_steers SET taken = true
    WHERE seq IN (SELECT seq FROM seen) AND NOT (SELECT yes FROM moved)
    RETURNING seq, id, body
), fresh AS (
    -- a steer already recorded another way (a run's own box) is taken, not recorded again
    SELECT seq, id, body FROM took
    WHERE id <> ALL($3::text[]) AND NOT EXISTS (
        SELECT FROM steerable_messages m WHERE m.session = $1 AND m.id = took.id
    )
), new AS (
    SELECT m.i - 1 AS i, m.id, m.body
    FROM unnest($3::text[], $4::text[]) WITH ORDINALITY AS m (id, body, i)
    UNION ALL
    SELECT cardinality($3::text[]) + row_number() OVER (ORDER BY seq) - 1, id, body FROM fresh
), written AS (
    INSERT INTO steerable_messages (session, position, id, body)
    SELECT $1, ok.n + new.i, new.id, new.body FROM ok, new
    WHERE NOT (SELECT yes FROM moved)
    ORDER BY new.i
)
SELECT stored.n, moved.yes, (SELECT count(*) FROM took), fresh.id, fresh.body
FROM stored CROSS JOIN moved LEFT JOIN fresh ON true ORDER BY fresh.seq
"""

_LENGTH = "SELECT coalesce(max(position) + 1, 0) FROM steerable_messages WHERE session = $1"

_MESSAGES = "SELECT position, id, body FROM steerable_messages WHERE session = $1 ORDER BY position"

_STEER = """
INSERT INTO steerable_steers (session, id, body) VALUES ($1, $2, $3)
ON CONFLICT ON CONSTRAINT steerable_steers_id DO NOTHING
"""

_STEERS = "SELECT id, body FROM steerable_steers WHERE session = $1 AND NOT taken ORDER BY seq"

_POSITION_KEY = "steerable_messages_position"

# How often the statement runs again when another writer committed during it: a take at the
# end (`at=None`) whose position was taken, or any save whose steers were taken while it
# waited on their locks (a pinned one then learns the new length, and conflicts). Each
# retry means that writer succeeded, so the store as a whole moves on; the bound only keeps
# one unlucky caller from spinning forever.
_RETRIES = 64

_VERSION = "SELECT coalesce(max(version), 0) FROM steerable_schema"


class PostgresStore(PostgresLeases, PostgresRewritable, PostgresForkable, PostgresJournal):
    """A :class:`steerable.Store` (:class:`~steerable.store.Rewritable`,
    :class:`~steerable.store.Forkable`, :class:`~steerable.store.Journaling` and
    :class:`~steerable.store.Repairable`) and a service store in Postgres, over an
    ``asyncpg`` pool.

    The store runs no DDL: apply :data:`steerable.stores.postgres.MIGRATIONS` first with
    :func:`steerable.stores.postgres.migrate` (and call :meth:`check_schema` at start-up
    to fail early if nobody did). It holds no connection between calls and has nothing to
    close; the pool is the application's. Arguments are trusted to be typed as annotated:
    the front door (:class:`steerable.Session`) validates them.
    """

    __slots__ = ("_checked", "pool")

    def __init__(self, pool: Pool) -> None:
        if isinstance(pool, str | bytes) or not hasattr(pool, "fetch"):
            raise UsageError(
                "PostgresStore takes the application's asyncpg pool, not"
                f" {type(pool).__name__}: `PostgresStore(await asyncpg.create_pool(dsn))`"
            )
        self.pool = pool
        self._checked = False  # this object has seen the database at SCHEMA_VERSION

    def __repr__(self) -> str:
        return f"PostgresStore({self.pool!r})"

    async def schema_version(self) -> int:
        """The highest migration the database has applied; 0 when it has none."""
        with translated("read the steerable schema version"):
            try:
                version: int = await self.pool.fetchval(_VERSION)
            except asyncpg.UndefinedTableError:
                return 0
        return version

    async def check_schema(self) -> None:
        """Raise :class:`StoreUnavailable` unless the database has this steerable's schema.

        Older, it names the migration step to apply; newer, it asks for a newer steerable.
        """
        require(await self.schema_version(), MIGRATIONS, store="Postgres", apply=APPLY)
        self._checked = True

    async def _check_once(self) -> None:
        # before this object's first verb, reads too: see the package docstring
        if not self._checked:
            await self.check_schema()

    # -- the Store verbs -------------------------------------------------------------------

    async def messages(self, session: str) -> list[Message]:
        """The session's transcript, in position order (empty for a new session)."""
        await self._check_once()
        with translated(f"read session {session!r}"):
            rows = await self.pool.fetch(_MESSAGES, session)
        return [
            codec.decode(id, body, where=f"session {session!r}, position {position}")
            for position, id, body in rows
        ]

    async def save(
        self, session: str, messages: Sequence[Message], *, at: int, take: int = 0
    ) -> list[Message]:
        """Append ``messages`` at position ``at``, then take up to ``take`` steers; atomic.

        One statement, one round trip, when no steer waits (or ``take`` is 0); when one
        waits, a first statement finds it and writes nothing, and a second saves and takes:
        two. Each is atomic. A :class:`StoreUnavailable` raised here (the connection died)
        means the save is stored whole or not at all: load the transcript to see which.
        """
        ids = [m.id for m in messages]
        if len(set(ids)) != len(ids):
            raise InvalidMessage(f"session {session!r}: one message id is twice in the save")
        bodies = [codec.encode(m) for m in messages]
        return await self._append(session, ids, bodies, at, take)

    async def take_steers(self, session: str, *, at: int | None, limit: int) -> list[Message]:
        """Take up to ``limit`` steers and record them at ``at`` (or at the end); atomic."""
        return await self._append(session, [], [], at, limit)

    async def steer(self, session: str, steer: Steer) -> None:
        """Leave ``steer`` in the session's box; a steer id seen before is ignored."""
        body = codec.encode(steer.message())
        await self._check_once()
        with translated(f"leave a steer for session {session!r}"):
            await self.pool.execute(_STEER, session, steer.id, body)

    async def steers(self, session: str) -> list[Steer]:
        """The steers waiting in the session's box, oldest first."""
        await self._check_once()
        with translated(f"read the steers of session {session!r}"):
            rows = await self.pool.fetch(_STEERS, session)
        return [
            Steer(codec.decode(id, body, where=f"session {session!r}, steer {id!r}").text, id)
            for id, body in rows
        ]

    # -- the one statement -----------------------------------------------------------------

    async def _append(
        self, session: str, ids: list[str], bodies: list[str], at: int | None, take: int
    ) -> list[Message]:
        await self._check_once()
        for _ in range(_RETRIES):
            with translated(f"save session {session!r}"):
                try:
                    rows = await self.pool.fetch(_PLAIN, session, at, ids, bodies, take)
                    steered = rows[0][2]  # a steer waits: nothing was written, take it
                    if steered:
                        rows = await self.pool.fetch(_SAVE, session, at, ids, bodies, take)
                except asyncpg.UniqueViolationError as exc:
                    if at is None and exc.constraint_name == _POSITION_KEY:
                        continue  # a writer appended first; take again at the new end
                    if at is not None:
                        # The id key can fire first when a writer saved these very messages
                        # (a replica redoing a step): that is a conflict, not a duplicate.
                        stored = await self.pool.fetchval(_LENGTH, session)
                        if exc.constraint_name == _POSITION_KEY or stored != at:
                            raise TranscriptConflict(session, at, stored) from None
                    raise InvalidMessage(
                        f"session {session!r}: a message id is already in the transcript"
                        f" ({exc.detail or exc})"
                    ) from None
                except (asyncpg.DeadlockDetectedError, asyncpg.SerializationError):
                    # Postgres rolled the statement back whole; it can run again as it is
                    # (the second is REPEATABLE READ's answer to a message removed since
                    # the snapshot, where READ COMMITTED leaves `prior` empty)
                    continue
            stored, moved = rows[0][0], rows[0][1]
            if moved:
                continue  # a take committed while this one waited: run on what it left
            marked = rows[0][2] if steered else 0
            taken = [(id, body) for _, _, _, id, body in rows if id is not None] if steered else []
            if at is not None and marked and not ids and not taken and stored == at:
                # it wrote no row, after maybe waiting on a lock: its length may be stale
                stored = await self._length(session)
            if at is not None and stored != at:
                raise TranscriptConflict(session, at, stored)
            return [
                codec.decode(id, body, where=f"session {session!r}, steer {id!r}")
                for id, body in taken
            ]
        stored = await self._length(session)
        raise TranscriptConflict(session, at if at is not None else stored, stored)

    async def _length(self, session: str) -> int:
        with translated(f"read the length of session {session!r}"):
            length: int = await self.pool.fetchval(_LENGTH, session)
        return length
