"""The Postgres store keeps the whole service store contract, against the real server.

Twice: on pools at the server's default isolation (READ COMMITTED), and on pools whose
transactions default to REPEATABLE READ, where a statement that finds its session row
changed since its snapshot is refused by the server and runs again.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg  # type: ignore[import-untyped]
import pytest

from steerable.stores.postgres import PostgresStore
from steerable.testing import OpenStore, ServiceContract
from tests.stores.postgres.support import DSN, open_store

ABILITIES = (
    "persistent",
    "processes",
    "corruptible",
    "outage",
    "lockable",
    "rewritable",
    "forkable",
    "journaled",
    "repairable",
)


@asynccontextmanager
async def _repeatable_read(dsn: str, database: str) -> AsyncIterator[PostgresStore]:
    """A store over a pool whose transactions are REPEATABLE READ (module level: it pickles)."""
    settings = {"default_transaction_isolation": "repeatable read"}
    pool = await asyncpg.create_pool(
        dsn, database=database, min_size=1, max_size=4, server_settings=settings
    )
    try:
        yield PostgresStore(pool)
    finally:
        await pool.close()


@pytest.mark.store_abilities(*ABILITIES)
class TestPostgresServiceStore(ServiceContract):
    @pytest.fixture
    def store_factory(self, database: str) -> OpenStore:
        return functools.partial(open_store, DSN, database)


@pytest.mark.store_abilities(*ABILITIES)
class TestPostgresServiceStoreRepeatableRead(ServiceContract):
    @pytest.fixture
    def store_factory(self, database: str) -> OpenStore:
        return functools.partial(_repeatable_read, DSN, database)
