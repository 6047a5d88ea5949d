"""Applying the Postgres store's migrations: in order, each once, with replicas racing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from steerable.stores.migrations import pending, refusal
from steerable.stores.postgres._reset import mark_for_reset, unmark
from steerable.stores.postgres._schema import MIGRATIONS
from steerable.stores.postgres._translate import APPLY, translated

# Every migrator of the database queues on this lock, held for its whole run (so the first
# applies every pending step and the later ones find them done) and taken again by each
# step's transaction (the lock of the releases that held it per step). Both kinds are let go
# with the connection of a migrator that dies.
_KEY = 7310582279216590951
_RUN_LOCK = f"SELECT pg_advisory_lock({_KEY})"
_RUN_UNLOCK = f"SELECT pg_advisory_unlock({_KEY})"
_LOCK = f"SELECT pg_advisory_xact_lock({_KEY})"

_BOOKS = """
CREATE TABLE IF NOT EXISTS steerable_schema (
    version    integer     PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""

_VERSION = "SELECT coalesce(max(version), 0) FROM steerable_schema"

_RECORD = "INSERT INTO steerable_schema (version) VALUES ($1)"


async def migrate(pool: Any) -> list[int]:
    """Apply the steps of :data:`MIGRATIONS` that the database lacks; the versions applied.

    ``pool`` is an ``asyncpg`` pool or connection; the tables go where its ``search_path``
    puts them, as the store's statements will look for them. Each step runs in a
    transaction of its own with the row that records it, under an advisory lock held for
    the whole run: replicas that all migrate at start-up queue, the first applies every
    pending step, and each later one finds them done. Safe to
    run again (it does nothing); a database newer than this steerable is left untouched
    (:class:`~steerable.errors.StoreUnavailable`, asking for a newer steerable).
    """
    applied: list[int] = []
    with translated("apply the steerable migrations"):
        async with _connection(pool) as connection:
            mark_for_reset(connection)  # until the run lock is let go (see ._reset)
            await connection.execute(_RUN_LOCK)
            try:
                while step := await _next_step(connection):
                    applied.append(step)
            finally:
                await connection.execute(_RUN_UNLOCK)
            unmark(connection)
    return applied


async def _next_step(connection: Any) -> int | None:
    """Apply the database's next step in one transaction; its version, or None if none."""
    async with connection.transaction():
        await connection.execute(_LOCK)
        await connection.execute(_BOOKS)
        version: int = await connection.fetchval(_VERSION)
        error = refusal(version, MIGRATIONS, store="Postgres", apply=APPLY)
        if error is not None and version > len(MIGRATIONS):
            raise error  # newer than this steerable: leave it as it is
        todo = pending(MIGRATIONS, version)
        if not todo:
            return None
        for statement in todo[0].steps:
            await connection.execute(statement)
        await connection.execute(_RECORD, todo[0].version)
        return todo[0].version


@asynccontextmanager
async def _connection(pool: Any) -> AsyncIterator[Any]:
    """A connection of ``pool``, or ``pool`` itself when it is one."""
    if hasattr(pool, "transaction"):
        yield pool
        return
    async with pool.acquire() as connection:
        yield connection
