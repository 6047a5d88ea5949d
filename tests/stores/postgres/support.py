"""Where the Postgres tests' server is, and the store factory the contract suite opens.

The server is ``STEERABLE_PG_DSN`` (default: the local one, user ``postgres``). Each test
run creates its own database, named here once per process: the suite's factory carries the
name to the processes it spawns.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg  # type: ignore[import-untyped]
import pytest

from steerable.stores.postgres import PostgresStore

DSN = os.environ.get("STEERABLE_PG_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
DATABASE = f"steerable_test_{secrets.token_hex(6)}"
REQUIRED = os.environ.get("STEERABLE_REQUIRE_SERVERS") == "1"


async def create_pool(database: str = DATABASE, **options: Any) -> Any:
    """A small pool on the test database: the server is shared with other test runs."""
    settings: dict[str, Any] = {"min_size": 1, "max_size": 4, "database": database}
    return await asyncpg.create_pool(DSN, **(settings | options))


@asynccontextmanager
async def open_store(dsn: str, database: str) -> AsyncIterator[PostgresStore]:
    """A store over a pool of its own on ``database`` (module level, so it pickles)."""
    pool = await asyncpg.create_pool(dsn, database=database, min_size=1, max_size=4)
    try:
        yield PostgresStore(pool)
    finally:
        await pool.close()


def server_address() -> tuple[str, int]:
    """The host and port of the server, for a relay in front of it."""
    parts = urlsplit(DSN)
    return parts.hostname or "127.0.0.1", parts.port or 5432


async def admin(sql: str) -> None:
    """Run ``sql`` on the server's admin database (CREATE/DROP DATABASE)."""
    connection = await asyncpg.connect(DSN, timeout=10)
    try:
        await connection.execute(sql)
    finally:
        await connection.close()


@asynccontextmanager
async def fresh_database(prefix: str, *, migrated: bool = True) -> AsyncIterator[str]:
    """A new database named ``prefix`` + random hex (migrated, unless told), dropped after.

    Without a usable server the test is skipped, or fails when servers are required.
    """
    from steerable.stores.postgres import migrate

    name = f"{prefix}{secrets.token_hex(6)}"
    try:
        await admin(f'CREATE DATABASE "{name}"')
    except (OSError, asyncpg.PostgresError) as exc:
        reason = f"Postgres is not usable: {type(exc).__name__}: {exc}"
        if REQUIRED:
            pytest.fail(f"{reason} (STEERABLE_REQUIRE_SERVERS=1)", pytrace=False)
        pytest.skip(reason)
    try:
        if migrated:
            connection = await asyncpg.connect(DSN, database=name, timeout=10)
            try:
                await migrate(connection)
            finally:
                await connection.close()
        yield name
    finally:
        await admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def until_lock_waits(pool: Any, count: int) -> None:
    """Until ``count`` backends of the pool's database wait on a lock someone holds.

    A bounded poll, not a timing assertion: it fails only if they never wait.
    """
    query = (
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        " AND cardinality(pg_blocking_pids(pid)) > 0 AND datname = current_database()"
    )
    for _ in range(2000):
        if await pool.fetchval(query) >= count:
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"{count} statements never waited on a lock")


def url_of(database: str) -> str:
    """The store URL (``steerable.stores.url``) of ``database`` on the test server."""
    parts = urlsplit(DSN)
    return urlunsplit((parts.scheme, parts.netloc, f"/{database}", "", ""))


async def until_waiting_on_a_lock(pool: Any, what: str) -> None:
    """Return once a connection of this database waits on a lock another holds (``what``
    names the waiter in the failure, after about 10 s)."""
    query = (
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        " AND cardinality(pg_blocking_pids(pid)) > 0 AND datname = current_database()"
    )
    for _ in range(2000):
        if await pool.fetchval(query) >= 1:
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"{what} never waited on a lock")
