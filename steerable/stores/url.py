"""Open a store from a URL: for command lines and scripts, which have no pool of their own.

The library's stores take the pool or client the application already has; a command line
(``steerable serve --store URL``) has none, so this module makes one, sized by the URL's
``pool`` query parameter (default 10), and closes it with the store::

    async with open_url("postgresql://localhost/app") as store: ...

- ``memory:`` - a :class:`~steerable.stores.memory.MemoryStore` (this process only)
- ``sqlite:///relative/path.db`` or ``sqlite:////absolute/path.db``
- ``postgresql://user@host:port/database`` (also ``postgres://``)
- ``mysql://user:password@host:port/database`` (also ``mariadb://``)
- ``mongodb://host:port/database`` (the database is the URL's path)

Nothing is migrated here: a server database must have had its migrations applied
(``steerable migrate --store URL``); the store refuses an older schema and names the step.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit, urlunsplit

from steerable.errors import UsageError

__all__ = ["SCHEMES", "open_url", "migrate_url"]

SCHEMES = ("memory", "sqlite", "postgresql", "postgres", "mysql", "mariadb", "mongodb")


def _split(url: str) -> tuple[str, Any, int]:
    if not isinstance(url, str) or ":" not in url:
        raise UsageError(
            f"a store URL looks like sqlite:///file.db or postgresql://host/db, not {url!r}"
        )
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise UsageError(f"unknown store scheme {scheme!r}; the schemes are {', '.join(SCHEMES)}")
    query = parse_qs(parts.query)
    try:
        size = int(query.pop("pool", ["10"])[0])
    except ValueError:
        raise UsageError(f"the pool size in {url!r} is a whole number") from None
    if size < 1:
        raise UsageError(f"the pool size in {url!r} is at least 1")
    return scheme, parts, size


def _sqlite_path(parts: Any) -> str:
    path = unquote(parts.netloc + parts.path)
    path = path[1:] if path.startswith("/") else path
    if not path:
        raise UsageError("a sqlite URL names a file: sqlite:///relative.db or sqlite:////abs.db")
    return path


def _database(parts: Any, what: str) -> str:
    name = unquote(parts.path.lstrip("/"))
    if not name:
        raise UsageError(f"a {what} URL names its database: {what}://host/DATABASE")
    return name


@asynccontextmanager
async def open_url(url: str) -> AsyncIterator[Any]:
    """The store ``url`` names, over a pool of its own, closed when the block ends."""
    scheme, parts, size = _split(url)
    if scheme == "memory":
        from steerable.stores.memory import MemoryStore

        yield MemoryStore()
    elif scheme == "sqlite":
        from steerable.stores.sqlite import SQLiteStore

        async with SQLiteStore(_sqlite_path(parts)) as store:
            yield store
    elif scheme in ("postgresql", "postgres"):
        async with _postgres(parts, size) as store:
            yield store
    elif scheme in ("mysql", "mariadb"):
        async with _mysql(parts, size) as store:
            yield store
    else:
        async with _mongodb(parts, size) as store:
            yield store


@asynccontextmanager
async def _postgres(parts: Any, size: int) -> AsyncIterator[Any]:
    import asyncpg  # type: ignore[import-untyped]

    from steerable.stores.postgres import PostgresStore, reset_when_needed

    dsn = urlunsplit(("postgresql", parts.netloc, parts.path, "", ""))
    # the pool is the store's alone, and the store leaves no session state it has not
    # marked: no reset query after every call (see steerable.stores.postgres)
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=size, reset=reset_when_needed)
    try:
        yield PostgresStore(pool)
    finally:
        await pool.close()


@asynccontextmanager
async def _mysql(parts: Any, size: int) -> AsyncIterator[Any]:
    import aiomysql  # type: ignore[import-untyped]

    from steerable.stores.mysql import MySQLStore

    pool = await aiomysql.create_pool(
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 3306,
        user=unquote(parts.username or "root"),
        password=unquote(parts.password or ""),
        db=_database(parts, "mysql"),
        minsize=0,
        maxsize=size,
        connect_timeout=5,
    )
    try:
        yield MySQLStore(pool)
    finally:
        pool.close()
        await pool.wait_closed()


@asynccontextmanager
async def _mongodb(parts: Any, size: int) -> AsyncIterator[Any]:
    from pymongo import AsyncMongoClient

    from steerable.stores.mongodb import MongoStore

    name = _database(parts, "mongodb")
    query = "&".join(p for p in parts.query.split("&") if p and not p.startswith("pool="))
    address = urlunsplit(("mongodb", parts.netloc, "/", query, ""))
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(address, maxPoolSize=size)
    try:
        yield MongoStore(client[name])
    finally:
        await client.close()


async def migrate_url(url: str) -> list[int]:
    """Apply the pending migrations of the server database ``url`` names; the versions applied.

    SQLite and memory set up their own tables: nothing to apply.
    """
    scheme, _, _ = _split(url)
    async with open_url(url) as store:
        if scheme in ("postgresql", "postgres"):
            from steerable.stores import postgres

            return await postgres.migrate(store.pool)
        if scheme in ("mysql", "mariadb"):
            from steerable.stores import mysql

            return await mysql.migrate(store.pool)
        if scheme == "mongodb":
            from steerable.stores import mongodb

            return await mongodb.migrate(store.db)
        return []
