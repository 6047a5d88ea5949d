"""A fresh database per test run, migrated to the latest schema; dropped when the run ends.

Without a reachable server the tests are skipped, or fail when ``STEERABLE_REQUIRE_SERVERS=1``
(as in CI), so a missing server can never pass for a green run.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest

from steerable.messages import new_id
from steerable.stores.postgres import PostgresStore, migrate
from tests.stores.postgres.support import DATABASE, DSN, REQUIRED, create_pool, server_address
from tests.stores.postgres.wire import Wire


async def _create() -> None:
    admin = await asyncpg.connect(DSN, timeout=10)
    try:
        await admin.execute(f'CREATE DATABASE "{DATABASE}"')
    finally:
        await admin.close()
    db = await asyncpg.connect(DSN, database=DATABASE, timeout=10)
    try:
        await migrate(db)
    finally:
        await db.close()


async def _drop() -> None:
    admin = await asyncpg.connect(DSN, timeout=10)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
    finally:
        await admin.close()


@pytest.fixture(scope="session", autouse=True)
def database() -> Iterator[str]:
    """The name of this run's database, created and migrated."""
    try:
        asyncio.run(_create())
    except (OSError, asyncpg.PostgresError) as exc:
        reason = f"Postgres at {DSN} is not usable: {type(exc).__name__}: {exc}"
        if REQUIRED:
            pytest.fail(f"{reason} (STEERABLE_REQUIRE_SERVERS=1)", pytrace=False)
        pytest.skip(reason)
    try:
        yield DATABASE
    finally:
        asyncio.run(_drop())


@pytest.fixture
async def pool(database: str) -> AsyncIterator[Any]:
    """A pool on this run's database, closed after the test."""
    pool = await create_pool(database)
    try:
        yield pool
    finally:
        await pool.close()


@pytest.fixture
def store(pool: Any) -> PostgresStore:
    """A store over :func:`pool`."""
    return PostgresStore(pool)


@pytest.fixture
async def empty_schema(pool: Any, database: str) -> AsyncIterator[Any]:
    """A pool whose search path is a new, empty Postgres schema of this run's database."""
    name = f"scratch_{new_id()[:12]}".lower()
    await pool.execute(f'CREATE SCHEMA "{name}"')
    scratch = await create_pool(database, server_settings={"search_path": name})
    try:
        yield scratch
    finally:
        await scratch.close()
        await pool.execute(f'DROP SCHEMA "{name}" CASCADE')


@pytest.fixture
async def wire() -> AsyncIterator[Wire]:
    """A relay to the server that counts the messages clients send."""
    wire = Wire(*server_address())
    await wire.restore()
    try:
        yield wire
    finally:
        await wire.cut()
