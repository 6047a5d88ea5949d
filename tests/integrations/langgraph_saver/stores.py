"""The stores the saver's tests run on: every steerable store, the servers' real ones.

``open_store(kind, where, mongo_uri)`` is an async context manager giving a fresh steerable
store of ``kind``; ``where`` is a directory (SQLite) and ``mongo_uri`` the SecantusDB server
of ``conftest.py`` (MongoDB), else unused. Postgres and MySQL/MariaDB get a database of
their own, created and migrated here and dropped after (as ``tests/stores/postgres`` and
``tests/stores/mysql`` make theirs); MongoDB a database of its own on the server, dropped
after. Without a server the test skips, or fails under ``STEERABLE_REQUIRE_SERVERS=1``.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, NoReturn

import pytest

from steerable.store import Store
from steerable.stores.memory import MemoryStore
from steerable.stores.sqlite import SQLiteStore

KINDS = ["memory", "sqlite", "postgres", "mysql", "mongodb"]


def unavailable(reason: str) -> NoReturn:
    """Skip, or fail where the servers are required (CI)."""
    if os.environ.get("STEERABLE_REQUIRE_SERVERS") == "1":
        pytest.fail(f"STEERABLE_REQUIRE_SERVERS=1 but {reason}", pytrace=False)
    pytest.skip(reason)


@asynccontextmanager
async def open_store(kind: str, where: Path, mongo_uri: str | None = None) -> AsyncIterator[Store]:
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
    elif kind == "mysql":
        async with _mysql() as store:
            yield store
    elif kind == "mongodb":
        assert mongo_uri is not None, "the mongodb kind needs conftest.py's saver_mongo_uri"
        async with _mongodb(mongo_uri) as store:
            yield store
    else:
        raise AssertionError(f"no store {kind!r}")


@asynccontextmanager
async def _mysql() -> AsyncIterator[Store]:
    import aiomysql  # type: ignore[import-untyped]

    from steerable.stores.mysql import MySQLStore, migrate
    from tests.stores.mysql import server

    name = f"steerable_saver_{secrets.token_hex(6)}"
    try:
        await server.query(f"CREATE DATABASE {name} CHARACTER SET utf8mb4", database=None)
    except (OSError, aiomysql.OperationalError) as exc:
        unavailable(f"no MySQL/MariaDB server at {server.HOST}:{server.PORT}: {exc}")
    try:
        async with server.pool_on(name) as pool:
            await migrate(pool)
            yield MySQLStore(pool)
    finally:
        await server.query(f"DROP DATABASE IF EXISTS {name}", database=None)


@asynccontextmanager
async def _mongodb(uri: str) -> AsyncIterator[Store]:
    from pymongo import AsyncMongoClient

    from steerable.stores.mongodb import MongoStore, migrate

    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(uri)
    database = client[f"steerable_saver_{secrets.token_hex(6)}"]
    try:
        await migrate(database)
        yield MongoStore(database)
        await client.drop_database(database.name)
    finally:
        await client.close()
