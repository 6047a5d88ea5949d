"""The MySQL store's migrations and schema check, each against a database of its own."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import AsyncIterator
from typing import Any

import pytest

from steerable import codec
from steerable.errors import StoreUnavailable, UsageError
from steerable.messages import new_id, user
from steerable.store import Steer
from steerable.stores.migrations import Migration, SchemaVersioned, check_schema
from steerable.stores.mysql import MIGRATIONS, SCHEMA_VERSION, MySQLStore, migrate
from tests.stores.mysql import server

_LATEST = [m.version for m in MIGRATIONS]


@pytest.fixture
async def empty() -> AsyncIterator[Any]:
    """A pool on a new, empty database of its own, dropped after the test."""
    name = f"{server.DATABASE}_m{new_id()[:8]}"
    await server.query(f"CREATE DATABASE {name} CHARACTER SET utf8mb4", database=None)
    try:
        async with server.pool_on(name) as pool:
            yield pool
    finally:
        await server.query(f"DROP DATABASE {name}", database=None)


async def _query(pool: Any, sql: str) -> Any:
    async with pool.acquire() as conn, conn.cursor() as cur:
        await cur.execute(sql)
        rows = await cur.fetchall()
        await conn.commit()
        return rows


def test_the_migrations_are_numbered_in_order() -> None:
    assert [m.version for m in MIGRATIONS] == list(range(1, SCHEMA_VERSION + 1))


def test_the_store_takes_a_pool_not_a_url() -> None:
    with pytest.raises(UsageError, match="aiomysql pool"):
        MySQLStore("mysql://root@localhost/test")  # type: ignore[arg-type]


async def test_a_fresh_database_migrated_passes_the_check(empty: Any) -> None:
    store = MySQLStore(empty)
    assert isinstance(store, SchemaVersioned)
    assert await store.schema_version() == 0
    assert await migrate(empty) == _LATEST
    assert await store.schema_version() == SCHEMA_VERSION
    await check_schema(store)
    await store.steer("s", Steer("x", "x"))
    assert [m.id for m in await store.save("s", [user("a")], at=0, take=1)] == ["x"]
    tables = await _query(
        empty,
        "SELECT TABLE_NAME, ENGINE, TABLE_COLLATION FROM information_schema.TABLES"
        " WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME <> 'steerable_schema'",
    )
    assert sorted(tables) == [
        (f"steerable_{t}", "InnoDB", "utf8mb4_bin") for t in ("messages", "sessions", "steers")
    ]


async def test_a_database_without_the_schema_is_refused_naming_the_first_step(
    empty: Any,
) -> None:
    store = MySQLStore(empty)
    step = rf"step 1 \({MIGRATIONS[0].summary}\)"
    with pytest.raises(StoreUnavailable, match=rf"no steerable schema.*{step}"):
        await store.check_schema()
    for call in (
        lambda: store.messages("s"),
        lambda: store.save("s", [user("a")], at=0),
        lambda: store.steer("s", Steer("x")),
    ):
        with pytest.raises(StoreUnavailable, match=rf"{step}.*mysql\.migrate\(pool\)"):
            await call()


async def test_an_older_database_is_refused_naming_the_step_and_migrate_applies_it(
    empty: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    await migrate(empty)
    step = Migration(
        SCHEMA_VERSION + 1,
        "the service's tables",
        (
            "CREATE TABLE IF NOT EXISTS steerable_next (id INT PRIMARY KEY)",
            "INSERT IGNORE INTO steerable_next VALUES (1)",
        ),
    )
    newer = (*MIGRATIONS, step)
    monkeypatch.setattr("steerable.stores.mysql._store.MIGRATIONS", newer)
    monkeypatch.setattr("steerable.stores.mysql._migrate.MIGRATIONS", newer)
    store = MySQLStore(empty)
    with pytest.raises(StoreUnavailable, match=rf"step {step.version} \(the service's tables"):
        await store.check_schema()
    for call in (  # every store object checks once, before its first call
        lambda: MySQLStore(empty).save("s", [user("x")], at=0),
        lambda: MySQLStore(empty).steers("s"),
    ):
        with pytest.raises(StoreUnavailable, match=rf"step {step.version} \(the service's"):
            await call()
    assert await migrate(empty) == [step.version]
    assert await migrate(empty) == []
    await store.check_schema()
    assert await _query(empty, "SELECT id FROM steerable_next") == ((1,),)


async def test_a_newer_database_asks_for_a_newer_steerable_and_is_left_alone(empty: Any) -> None:
    await migrate(empty)
    await _query(empty, "INSERT INTO steerable_schema (version) VALUES (99)")
    with pytest.raises(StoreUnavailable, match=r"version 99.*upgrade steerable"):
        await MySQLStore(empty).check_schema()
    with pytest.raises(StoreUnavailable, match=r"version 99.*upgrade steerable"):
        await migrate(empty)
    with pytest.raises(StoreUnavailable, match=r"version 99.*upgrade steerable"):
        await MySQLStore(empty).save("s", [user("x")], at=0)


async def test_replicas_migrating_at_once_apply_each_step_once(empty: Any) -> None:
    # Without the named lock two migrators both find version 0, both run step 1 and the
    # second one's record is a duplicate key.
    applied = await asyncio.gather(*(migrate(empty) for _ in range(4)))
    assert sorted(applied) == [[], [], [], _LATEST]
    await MySQLStore(empty).check_schema()


async def test_a_database_of_the_old_schema_statements_is_adopted(empty: Any) -> None:
    # Releases before the migrations shipped the statements of step 1 and recorded nothing.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for statement in MIGRATIONS[0].steps:
            await _query(empty, statement)
    await _query(
        empty,
        "INSERT INTO steerable_messages (session, position, id, body)"
        f" VALUES ('s', 0, 'k', '{codec.encode(user('kept', id='k'))}')",
    )
    store = MySQLStore(empty)
    assert await store.schema_version() == 0
    with pytest.raises(StoreUnavailable, match=r"no steerable schema.*step 1"):
        await store.messages("s")  # it records no version: the store cannot tell it
    assert await migrate(empty) == _LATEST  # step 1 again: every statement is idempotent
    assert [m.text for m in await store.messages("s")] == ["kept"]
