"""The stores the service benchmarks run on, each on a fresh database, opened all at once.

:func:`targets` yields a :class:`Target` for every store that can run here (memory, SQLite,
and Postgres, MySQL/MariaDB and MongoDB when the server answers and steerable's store for it
imports; the others get a note saying why not). ``Target.open()`` gives a new store object
over a connection pool of its own, as a separate replica would have; memory is one object
(a second one would not share the data).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench._servers import (
    PG_HOST,
    PG_PORT,
    PG_USER,
    Unavailable,
    close_mysql_pool,
    mongodb_database,
    mysql_database,
    mysql_pool,
    postgres_database,
    postgres_pool,
    steerable_mongodb,
    steerable_mysql,
    steerable_postgres,
    store_module,
)
from bench._service_counting import Both
from steerable.stores.memory import MemoryStore
from steerable.stores.sqlite import SQLiteStore

POOL = 10

MEMORY, SQLITE, POSTGRES, MYSQL, MONGODB = (
    "memory",
    "SQLite",
    "Postgres",
    "MySQL/MariaDB",
    "MongoDB",
)
STORES = (MEMORY, SQLITE, POSTGRES, MYSQL, MONGODB)


@dataclass
class Target:
    """A store to run on: ``open()`` makes another store object on the same database.

    ``url`` is the store URL a replica process opens (None where a process cannot share
    the data); ``server`` names what answered.
    """

    name: str
    open: Callable[[], Awaitable[Both]]
    url: str | None = None
    server: str = ""
    notes: list[str] = field(default_factory=list)


@contextlib.asynccontextmanager
async def targets(
    root: Path, wanted: tuple[str, ...]
) -> AsyncIterator[tuple[list[Target], list[str]]]:
    """The targets of ``wanted`` that can run here, and notes on the ones that cannot."""
    found: list[Target] = []
    notes: list[str] = []
    async with contextlib.AsyncExitStack() as stack:
        openers: dict[str, Callable[[], contextlib.AbstractAsyncContextManager[Target]]] = {
            MEMORY: _memory,
            SQLITE: lambda: _sqlite(root / "service.db"),
            POSTGRES: _postgres,
            MYSQL: _mysql,
            MONGODB: _mongodb,
        }
        for name in wanted:
            try:
                found.append(await stack.enter_async_context(_tolerant(openers[name]())))
            except Unavailable as exc:
                notes.append(f"{name} skipped: {exc}")
        yield found, notes


@contextlib.asynccontextmanager
async def _tolerant(
    opened: contextlib.AbstractAsyncContextManager[Target],
) -> AsyncIterator[Target]:
    """``opened``, whose clean-up may fail without losing the run (a server restarted by
    somebody else meanwhile): the failure is said on stderr."""
    target = await opened.__aenter__()
    try:
        yield target
    except BaseException as exc:
        if not await opened.__aexit__(type(exc), exc, exc.__traceback__):
            raise
    else:
        try:
            await opened.__aexit__(None, None, None)
        except Exception as exc:
            print(f"{target.name}: the clean-up failed: {exc}", file=sys.stderr)


@contextlib.asynccontextmanager
async def _memory() -> AsyncIterator[Target]:
    store = MemoryStore()

    async def open_() -> Both:
        return store

    yield Target(MEMORY, open_)


@contextlib.asynccontextmanager
async def _sqlite(path: Path) -> AsyncIterator[Target]:
    async with contextlib.AsyncExitStack() as stack:

        async def open_() -> Both:
            return _cast(await stack.enter_async_context(SQLiteStore(path)))

        yield Target(SQLITE, open_, url=f"sqlite:///{path}")


@contextlib.asynccontextmanager
async def _postgres() -> AsyncIterator[Target]:
    store_module("postgres")
    async with contextlib.AsyncExitStack() as stack:
        db = await stack.enter_async_context(postgres_database("service"))
        first = True

        async def open_() -> Both:
            nonlocal first
            pool = await postgres_pool(db, POOL)
            stack.push_async_callback(pool.close)
            if first:  # migrate once; the other store objects find the schema in place
                first = False
                store: Both = await steerable_postgres(pool)
                return store
            return _cast(store_module("postgres").PostgresStore(pool))

        url = f"postgresql://{PG_USER}@{PG_HOST}:{PG_PORT}/{db.name}?pool={POOL}"
        await open_()  # the schema, before any replica process opens the URL
        yield Target(POSTGRES, open_, url=url)


@contextlib.asynccontextmanager
async def _mysql() -> AsyncIterator[Target]:
    store_module("mysql")
    async with contextlib.AsyncExitStack() as stack:
        db = await stack.enter_async_context(mysql_database("service"))
        first = True

        async def open_() -> Both:
            nonlocal first
            pool = await mysql_pool(db, POOL)
            stack.push_async_callback(close_mysql_pool, pool)
            if first:
                first = False
                store: Both = await steerable_mysql(pool)
                return store
            return _cast(store_module("mysql").MySQLStore(pool))

        await open_()
        yield Target(MYSQL, open_, url=db.url("mysql") + f"?pool={POOL}")


@contextlib.asynccontextmanager
async def _mongodb() -> AsyncIterator[Target]:
    store_module("mongodb")
    async with mongodb_database("service", pool=POOL) as (_, db, server):
        store = await steerable_mongodb(db)

        async def open_() -> Both:
            # one client (its pool) for all: a second client costs SecantusDB seconds
            return _cast(store)

        yield Target(MONGODB, open_, server=server)


def _cast(store: Any) -> Both:
    typed: Both = store
    return typed
