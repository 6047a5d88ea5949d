"""Database servers for the benchmarks: a fresh database per run, dropped afterwards.

Each ``*_database`` context manager yields the name of a new, empty database on its server,
or raises :class:`Unavailable` with a note saying why the backend is skipped (the server
does not answer, its driver or steerable's store for it is not installed). Where the
servers are can be changed with the environment variables below.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

PG_HOST = os.environ.get("BENCH_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("BENCH_PG_PORT", "5432"))
PG_USER = os.environ.get("BENCH_PG_USER", "postgres")
MY_HOST = os.environ.get("BENCH_MYSQL_HOST", "127.0.0.1")
MY_PORT = int(os.environ.get("BENCH_MYSQL_PORT", "3306"))
MY_USER = os.environ.get("BENCH_MYSQL_USER", "root")
MY_PASSWORD = os.environ.get("BENCH_MYSQL_PASSWORD", "")
MONGO_URL = os.environ.get("BENCH_MONGODB_URL", "mongodb://127.0.0.1:27017")


class Unavailable(Exception):
    """A backend the benchmark skips; the message says why."""


def driver(module: str, extra: str) -> Any:
    """Import a database driver, or :class:`Unavailable` naming the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise Unavailable(f"{module} is not installed (pip install steerable[{extra}])") from exc


def store_module(backend: str) -> Any:
    """``steerable.stores.<backend>``, or :class:`Unavailable` if it does not import."""
    try:
        return importlib.import_module(f"steerable.stores.{backend}")
    except ImportError as exc:
        raise Unavailable(f"steerable.stores.{backend} does not import: {exc}") from exc


def _name(tag: str) -> str:
    return f"steerable_bench_{tag}_{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class Database:
    """A fresh database on a server: its name, and where the server is."""

    name: str
    host: str
    port: int
    user: str
    password: str = ""

    def url(self, scheme: str) -> str:
        """A SQLAlchemy-style URL, ``scheme://user:password@host:port/name``."""
        secret = f":{self.password}" if self.password else ""
        return f"{scheme}://{self.user}{secret}@{self.host}:{self.port}/{self.name}"


@contextlib.asynccontextmanager
async def postgres_database(tag: str) -> AsyncIterator[Database]:
    """A new database on the Postgres server, dropped on exit."""
    asyncpg = driver("asyncpg", "postgres")
    try:
        admin = await asyncpg.connect(
            host=PG_HOST, port=PG_PORT, user=PG_USER, database="postgres", timeout=5
        )
    except (TimeoutError, OSError, asyncpg.PostgresError) as exc:
        raise Unavailable(f"Postgres at {PG_HOST}:{PG_PORT} does not answer: {exc}") from exc
    name = _name(tag)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield Database(name, PG_HOST, PG_PORT, PG_USER)
        finally:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


@contextlib.asynccontextmanager
async def mysql_database(tag: str) -> AsyncIterator[Database]:
    """A new database on the MySQL/MariaDB server, dropped on exit."""
    aiomysql = driver("aiomysql", "mysql")
    try:
        admin = await asyncio.wait_for(
            aiomysql.connect(
                host=MY_HOST, port=MY_PORT, user=MY_USER, password=MY_PASSWORD, autocommit=True
            ),
            5,
        )
    except (TimeoutError, OSError, aiomysql.Error) as exc:
        raise Unavailable(f"MySQL at {MY_HOST}:{MY_PORT} does not answer: {exc}") from exc
    name = _name(tag)
    try:
        async with admin.cursor() as cursor:
            await cursor.execute(f"CREATE DATABASE `{name}`")
        try:
            yield Database(name, MY_HOST, MY_PORT, MY_USER, MY_PASSWORD)
        finally:
            async with admin.cursor() as cursor:
                await cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
    finally:
        admin.close()


@contextlib.asynccontextmanager
async def mongodb_database(tag: str, pool: int = 100) -> AsyncIterator[tuple[Any, Any, str]]:
    """``(client, database, server)``: a new database on the MongoDB server, dropped on exit.

    ``server`` names what answered: MongoDB and its version, or a look-alike (SecantusDB,
    the tests' wire-protocol server, whose speed is not MongoDB's).
    """
    pymongo = driver("pymongo", "mongodb")
    client = pymongo.AsyncMongoClient(MONGO_URL, serverSelectionTimeoutMS=2000, maxPoolSize=pool)
    try:
        try:
            info = await client.admin.command("buildInfo")
        except pymongo.errors.PyMongoError as exc:
            reason = str(exc).split(" (configured timeouts")[0][:120]
            raise Unavailable(f"MongoDB at {MONGO_URL} does not answer: {reason}") from exc
        server = f"MongoDB {info.get('version')}"
        if "secantusVersion" in info:
            server = (
                f"SecantusDB {info['secantusVersion']} (MongoDB wire protocol, written in Python)"
            )
        name = _name(tag)
        try:
            yield client, client[name], server
        finally:
            await client.drop_database(name)
    finally:
        await client.close()


async def postgres_pool(db: Database, size: int, **options: Any) -> Any:
    """An asyncpg pool of ``size`` connections on ``db`` (``options``: more of its settings)."""
    asyncpg = driver("asyncpg", "postgres")
    return await asyncpg.create_pool(
        host=db.host,
        port=db.port,
        user=db.user,
        database=db.name,
        min_size=size,
        max_size=size,
        **options,
    )


async def mysql_pool(db: Database, size: int) -> Any:
    """An aiomysql pool of ``size`` connections on ``db`` (autocommit, utf8mb4)."""
    aiomysql = driver("aiomysql", "mysql")
    return await aiomysql.create_pool(
        host=db.host,
        port=db.port,
        user=db.user,
        password=db.password,
        db=db.name,
        minsize=size,
        maxsize=size,
        autocommit=True,
        charset="utf8mb4",
    )


async def close_mysql_pool(pool: Any) -> None:
    """Close an aiomysql pool and wait for its connections."""
    pool.close()
    await pool.wait_closed()


async def steerable_postgres(pool: Any) -> Any:
    """steerable's Postgres store on ``pool``, its migrations applied first."""
    postgres = store_module("postgres")
    await postgres.migrate(pool)
    return postgres.PostgresStore(pool)


async def steerable_mysql(pool: Any) -> Any:
    """steerable's MySQL store on ``pool``, its migrations applied first."""
    mysql = store_module("mysql")
    await mysql.migrate(pool)
    return mysql.MySQLStore(pool)


async def steerable_mongodb(db: Any) -> Any:
    """steerable's MongoDB store on the pymongo ``AsyncDatabase`` ``db``, migrated first."""
    mongodb = store_module("mongodb")
    await mongodb.migrate(db)
    return mongodb.MongoStore(db)
