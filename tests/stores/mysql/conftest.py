"""A fresh database, migrated, for this run of the MySQL tests, dropped after.

If the server cannot be reached the tests are skipped, or fail when
``STEERABLE_REQUIRE_SERVERS=1`` (CI sets it: a CI run must not pass by skipping).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiomysql  # type: ignore[import-untyped]
import pytest

from steerable.stores.mysql import MySQLStore, migrate
from tests.stores.mysql import server


async def _create() -> None:
    await server.query(f"CREATE DATABASE {server.DATABASE} CHARACTER SET utf8mb4", database=None)
    async with server.pool_on() as pool:
        await migrate(pool)


@pytest.fixture(scope="session", autouse=True)
def mysql_database() -> Iterator[str]:
    """The name of this run's database, created and migrated."""
    try:
        asyncio.run(_create())
    except (OSError, aiomysql.OperationalError) as exc:
        reason = f"no MySQL/MariaDB server at {server.HOST}:{server.PORT}: {exc}"
        if os.environ.get("STEERABLE_REQUIRE_SERVERS") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    try:
        yield server.DATABASE
    finally:
        asyncio.run(server.query(f"DROP DATABASE IF EXISTS {server.DATABASE}", database=None))


@pytest.fixture
async def pool() -> AsyncIterator[Any]:
    """A pool with aiomysql's defaults (no autocommit, bytes from the server)."""
    pool = await server.create_pool()
    yield pool
    pool.close()
    await pool.wait_closed()


@pytest.fixture
def store(pool: Any) -> MySQLStore:
    """A store over ``pool``."""
    return MySQLStore(pool)
