"""The MySQL/MariaDB server the tests use, and a fresh database on it for this test run.

Where the server is comes from the environment (``STEERABLE_MYSQL_HOST``, ``_PORT``,
``_USER``, ``_PASSWORD``); the database is new for every run (``DATABASE``), created and
dropped by ``conftest.py``, so runs never see each other's rows.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import quote

import aiomysql  # type: ignore[import-untyped]
import pytest

from steerable.stores.mysql import MySQLStore, migrate

HOST = os.environ.get("STEERABLE_MYSQL_HOST", "127.0.0.1")
PORT = int(os.environ.get("STEERABLE_MYSQL_PORT", "3306"))
USER = os.environ.get("STEERABLE_MYSQL_USER", "root")
PASSWORD = os.environ.get("STEERABLE_MYSQL_PASSWORD", "")

# A child process imports this module again and draws another name: the name travels to
# it inside the pickled factory instead (see ``open_store``).
DATABASE = f"steerable_test_{secrets.token_hex(6)}"


async def create_pool(database: str | None = DATABASE, **options: Any) -> Any:
    """An aiomysql pool on the test server; ``options`` override the pool's settings."""
    settings: dict[str, Any] = {
        "host": HOST,
        "port": PORT,
        "user": USER,
        "password": PASSWORD,
        "db": database,
        "minsize": 0,
        "maxsize": 10,
        "connect_timeout": 5,
    }
    settings.update(options)
    return await aiomysql.create_pool(**settings)


@asynccontextmanager
async def pool_on(database: str | None = DATABASE, **options: Any) -> AsyncIterator[Any]:
    """``create_pool``, closed at the end of the block."""
    pool = await create_pool(database, **options)
    try:
        yield pool
    finally:
        pool.close()
        await pool.wait_closed()


@asynccontextmanager
async def open_store(database: str, **options: Any) -> AsyncIterator[MySQLStore]:
    """A store over a pool of its own on ``database``; picklable with functools.partial."""
    async with pool_on(database, **options) as pool:
        yield MySQLStore(pool)


async def query(sql: str, args: tuple[Any, ...] = (), *, database: str | None = DATABASE) -> Any:
    """Run one statement on a connection of its own (autocommit) and return its rows."""
    conn = await aiomysql.connect(
        host=HOST, port=PORT, user=USER, password=PASSWORD, db=database, autocommit=True
    )
    try:
        async with conn.cursor() as cur:
            await cur.execute(sql, args or None)
            return await cur.fetchall()
    finally:
        conn.close()


@asynccontextmanager
async def scratch_database() -> AsyncIterator[Any]:
    """A pool on a new, empty database of its own, dropped at the end of the block."""
    name = f"{DATABASE}_m{uuid.uuid4().hex[:8]}"
    await query(f"CREATE DATABASE {name} CHARACTER SET utf8mb4", database=None)
    try:
        async with pool_on(name) as pool:
            yield pool
    finally:
        await query(f"DROP DATABASE {name}", database=None)


@asynccontextmanager
async def migrated_url() -> AsyncIterator[str]:
    """The store URL of a new database of its own, migrated, dropped at the end of the block.

    Without a usable server the test is skipped, or fails when servers are required.
    """
    name = f"{DATABASE}_u{uuid.uuid4().hex[:8]}"
    try:
        await query(f"CREATE DATABASE {name} CHARACTER SET utf8mb4", database=None)
    except (OSError, aiomysql.OperationalError) as exc:
        reason = f"no MySQL/MariaDB server at {HOST}:{PORT}: {exc}"
        if os.environ.get("STEERABLE_REQUIRE_SERVERS") == "1":
            pytest.fail(f"{reason} (STEERABLE_REQUIRE_SERVERS=1)", pytrace=False)
        pytest.skip(reason)
    try:
        async with pool_on(name) as pool:
            await migrate(pool)
        yield f"mysql://{quote(USER)}:{quote(PASSWORD)}@{HOST}:{PORT}/{name}"
    finally:
        await query(f"DROP DATABASE {name}", database=None)


async def on_pool(pool: Any, sql: str) -> Any:
    """Run one statement on a connection of ``pool`` and commit; its rows."""
    async with pool.acquire() as conn, conn.cursor() as cur:
        await cur.execute(sql)
        rows = await cur.fetchall()
        await conn.commit()
        return rows


async def until_lock_waits(pool: Any, count: int) -> None:
    """Until ``count`` transactions on the pool's database wait for a lock.

    A bounded poll, not a timing assertion: it fails only if they never wait.
    """
    sql = (
        "SELECT count(*) FROM information_schema.INNODB_TRX t"
        " JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id"
        " WHERE t.trx_state = 'LOCK WAIT' AND p.DB = DATABASE()"
    )
    for _ in range(400):
        if int((await on_pool(pool, sql))[0][0]) >= count:
            return
        await asyncio.sleep(0.15)  # the server refreshes INNODB_TRX at most every 0.1 s
    raise AssertionError(f"{count} transactions never waited for a lock")
