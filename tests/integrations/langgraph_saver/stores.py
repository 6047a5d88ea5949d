"""The stores the saver's tests run on: memory and SQLite always, Postgres on the real server.

``open_store(kind, where)`` is an async context manager giving a fresh steerable store of
``kind``; ``where`` is a directory (SQLite) or unused. Postgres gets a database of its own,
created and migrated here and dropped after (``tests/stores/postgres/support.py``); without a
server the test skips, or fails under ``STEERABLE_REQUIRE_SERVERS=1``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from steerable.store import Store
from steerable.stores.memory import MemoryStore
from steerable.stores.sqlite import SQLiteStore

KINDS = ["memory", "sqlite", "postgres"]


@asynccontextmanager
async def open_store(kind: str, where: Path) -> AsyncIterator[Store]:
    """A fresh store of ``kind`` (see the module docstring)."""
    if kind == "memory":
        yield MemoryStore()
    elif kind == "sqlite":
        async with SQLiteStore(where / "saver.db") as store:
            yield store
    elif kind == "postgres":
        from steerable.stores.postgres import PostgresStore
        from tests.stores.postgres.support import create_pool, fresh_database

        async with fresh_database("steerable_saver_") as name:
            pool = await create_pool(name)
            try:
                yield PostgresStore(pool)
            finally:
                await pool.close()
    else:
        raise AssertionError(f"no store {kind!r}")
