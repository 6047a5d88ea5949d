"""How the Postgres store's service halves run their statements: a read, or a locking write.

A locking write is one SQL statement of data-modifying CTEs, so one implicit transaction
and one round trip once asyncpg has prepared it. It starts by locking the session's row of
``steerable_sessions`` (:data:`LOCKED`: ``SELECT ... FOR UPDATE``): every write of a session
queues on that lock, so the checks (fencing by epoch and holder, the transcript's length,
which steers were offered, an enqueue's conditions) and the writes that follow them are one
atomic step, and a write refused is refused whole.

One statement reads one snapshot, taken when it starts, before it waits for the lock, while
the lock returns the row as the last writer left it (READ COMMITTED follows a locked row to
its newest version). So the row carries ``version``, which every write but a renewal grows:
a statement whose snapshot saw a different version than the lock returned read tables a
writer has changed since, writes nothing and runs again on a fresh snapshot (a renewal
changes only the expiry, which the statements read from the locked row). Each rerun means
another writer committed, so the store as a whole moves on.

This module is below every other of the package's service modules: they import it, it
imports none of them (nor :mod:`._store`, which imports :class:`Pool` from here).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from typing import Any, Final, Protocol

import asyncpg  # type: ignore[import-untyped]

from steerable.errors import StoreUnavailable, UsageError
from steerable.stores.postgres._translate import translated

__all__ = ["CHANNEL", "FLAGS", "LOCKED", "RETRIES", "Pool", "Statements", "acquired", "hint"]

CHANNEL: Final = "steerable"
"""The ``LISTEN`` channel of the hints; a payload is JSON ``{"kind", "session"}``."""

# How often a statement runs again when its snapshot is older than the row it locked (or the
# server rolled it back for a deadlock or, at REPEATABLE READ, for that same change); each
# rerun means another writer committed.
RETRIES: Final = 64

LOCKED: Final = """
locked AS (
    SELECT * FROM steerable_sessions WHERE session = $1 FOR UPDATE
), fresh AS (
    SELECT locked.* FROM locked JOIN steerable_sessions snap USING (session)
    WHERE snap.version = locked.version
)"""
"""The CTEs ``locked`` (the session's row, locked) and ``fresh`` (it, only when the
statement's snapshot saw the version locked)."""

FLAGS: Final = """EXISTS (SELECT FROM locked) AS known, EXISTS (SELECT FROM fresh) AS fresh,
    (SELECT epoch FROM locked) AS epoch"""
"""The columns every locking write returns first: the session has a row; the snapshot is
current; the session's epoch."""

_NEW_SESSION = "INSERT INTO steerable_sessions (session) VALUES ($1) ON CONFLICT DO NOTHING"


def hint(kind: str) -> str:
    """The SQL that notifies a hint of ``kind`` for session ``$1`` when the write commits."""
    return f"pg_notify('{CHANNEL}', json_build_object('kind', '{kind}', 'session', $1::text)::text)"


@asynccontextmanager
async def acquired(pool: Any, doing: str) -> AsyncIterator[Any]:
    """One connection of ``pool`` for a transaction (``pool`` itself when it is one)."""
    acquire = getattr(pool, "acquire", None)
    if acquire is not None:
        async with acquire() as connection:
            yield connection
    elif hasattr(pool, "transaction"):
        yield pool  # a connection the application gave the store
    else:
        raise UsageError(f"cannot {doing}: it needs an asyncpg pool (or connection)")


class Pool(Protocol):
    """The part of an ``asyncpg.Pool`` the store uses."""

    async def fetch(self, query: str, *args: Any) -> list[Any]:
        """Run ``query`` on a pooled connection; its rows."""
        ...

    async def fetchval(self, query: str, *args: Any) -> Any:
        """Run ``query`` on a pooled connection; the first column of its first row."""
        ...

    async def execute(self, query: str, *args: Any) -> str:
        """Run ``query`` on a pooled connection; its status."""
        ...


class Statements:
    """The store's pool, and its two ways of running a statement (a read, a locking write)."""

    __slots__ = ()

    pool: Pool

    async def _check_once(self) -> None:
        raise NotImplementedError  # provided by PostgresStore

    async def _fetch(self, doing: str, query: str, *args: Any) -> list[Any]:
        await self._check_once()
        with translated(doing):
            rows: list[Any] = await self.pool.fetch(query, *args)
        return rows

    async def _write(
        self,
        doing: str,
        query: str,
        *args: Any,
        create: bool = False,
        unknown: Callable[[], None] | None = None,
    ) -> list[Any]:
        """The rows of a locking write (``$1`` the session), run until its snapshot was current.

        ``create`` makes the session's row when it has none (an ``enqueue``, which then runs
        again); ``unknown`` is called first and may raise to refuse without making it.
        Otherwise a session without a row answers ``known`` false and nothing is written. A
        unique key that fires is raised as it is (``asyncpg.UniqueViolationError``) for
        ``step`` to tell a conflict from a duplicate id.
        """
        await self._check_once()
        for _ in range(RETRIES):
            unique: asyncpg.UniqueViolationError | None = None
            with translated(doing):
                try:
                    rows: list[Any] = await self.pool.fetch(query, *args)
                except (asyncpg.DeadlockDetectedError, asyncpg.SerializationError):
                    # rolled back whole: run it again as it is (the second is REPEATABLE
                    # READ's answer to a row changed since the snapshot, for the same rerun)
                    continue
                except asyncpg.UniqueViolationError as exc:
                    unique = exc
            if unique is not None:
                raise unique
            if not rows[0]["known"] and create:
                if unknown is not None:
                    unknown()
                # (at REPEATABLE READ a racer's row refuses the insert: it is made either way)
                with translated(doing), suppress(asyncpg.SerializationError):
                    await self.pool.execute(_NEW_SESSION, args[0])
                continue
            if not rows[0]["known"] or rows[0]["fresh"]:
                return rows
        raise StoreUnavailable(
            f"cannot {doing}: the session changed under each of {RETRIES} attempts"
        )
