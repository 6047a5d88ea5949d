"""The Postgres store's migrations, the schema check, and the import that names its extra."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from steerable.errors import StoreUnavailable, UsageError
from steerable.messages import user
from steerable.stores import migrations
from steerable.stores.migrations import Migration, SchemaVersioned, check_schema
from steerable.stores.postgres import MIGRATIONS, SCHEMA_VERSION, PostgresStore, migrate


def test_the_migrations_are_numbered_in_order_and_the_version_is_the_last() -> None:
    assert [m.version for m in MIGRATIONS] == list(range(1, len(MIGRATIONS) + 1))
    assert MIGRATIONS[-1].version == SCHEMA_VERSION
    with pytest.raises(UsageError, match=r"1, 2, 3"):
        migrations.validated([*MIGRATIONS, Migration(SCHEMA_VERSION + 2, "a gap", ())])


async def test_a_fresh_database_migrated_passes_the_check_and_keeps_no_json(
    empty_schema: Any,
) -> None:
    store = PostgresStore(empty_schema)
    assert isinstance(store, SchemaVersioned)
    assert await store.schema_version() == 0
    assert await migrate(empty_schema) == [m.version for m in MIGRATIONS]
    assert await store.schema_version() == SCHEMA_VERSION
    await check_schema(store)
    await store.save("s", [user("x")], at=0)
    types = await empty_schema.fetch(
        "SELECT DISTINCT data_type FROM information_schema.columns"
        " WHERE table_name LIKE 'steerable\\_%' AND table_schema = current_schema()"
    )
    assert {t[0] for t in types} == {
        "text",
        "bigint",
        "boolean",
        "integer",
        "timestamp with time zone",
    }


async def test_a_database_without_the_schema_is_refused_naming_the_first_step(
    empty_schema: Any,
) -> None:
    store = PostgresStore(empty_schema)
    step = rf"step 1 \({MIGRATIONS[0].summary}\)"
    with pytest.raises(StoreUnavailable, match=rf"no steerable schema.*{step}.*migrate\(pool\)"):
        await store.check_schema()
    with pytest.raises(StoreUnavailable, match=rf"{step}.*migrate\(pool\)"):
        await store.save("s", [user("x")], at=0)


async def test_an_older_database_is_refused_naming_the_step_and_migrate_applies_it(
    empty_schema: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The next release appends a step: a database at today's version is then older.
    await migrate(empty_schema)
    step = Migration(
        SCHEMA_VERSION + 1,
        "the service's tables",
        (
            "CREATE TABLE steerable_next (id text PRIMARY KEY)",
            "INSERT INTO steerable_next VALUES ('a')",
        ),
    )
    newer = (*MIGRATIONS, step)
    monkeypatch.setattr("steerable.stores.postgres._store.MIGRATIONS", newer)
    monkeypatch.setattr("steerable.stores.postgres._migrate.MIGRATIONS", newer)
    store = PostgresStore(empty_schema)
    with pytest.raises(
        StoreUnavailable, match=rf"version {SCHEMA_VERSION};.*step {step.version} \(the service's"
    ):
        await store.check_schema()
    for call in (  # every store object checks once, before its first call
        lambda: PostgresStore(empty_schema).save("s", [user("x")], at=0),
        lambda: PostgresStore(empty_schema).steers("s"),
    ):
        with pytest.raises(StoreUnavailable, match=rf"step {step.version} \(the service's"):
            await call()
    assert await migrate(empty_schema) == [step.version]
    assert await migrate(empty_schema) == []
    await store.check_schema()
    assert await empty_schema.fetchval("SELECT count(*) FROM steerable_next") == 1


async def test_a_step_that_fails_is_not_recorded_and_leaves_nothing(
    empty_schema: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    await migrate(empty_schema)
    broken = Migration(
        SCHEMA_VERSION + 1,
        "broken",
        ("CREATE TABLE steerable_half (id text)", "SELECT * FROM no_such_table"),
    )
    monkeypatch.setattr("steerable.stores.postgres._migrate.MIGRATIONS", (*MIGRATIONS, broken))
    with pytest.raises(StoreUnavailable, match="apply the steerable migrations"):
        await migrate(empty_schema)
    assert await PostgresStore(empty_schema).schema_version() == SCHEMA_VERSION
    assert await empty_schema.fetchval("SELECT to_regclass('steerable_half')") is None


async def test_a_newer_database_asks_for_a_newer_steerable_and_is_left_alone(
    empty_schema: Any,
) -> None:
    await migrate(empty_schema)
    await empty_schema.execute("INSERT INTO steerable_schema (version) VALUES (99)")
    with pytest.raises(StoreUnavailable, match=r"version 99.*upgrade steerable"):
        await PostgresStore(empty_schema).check_schema()
    with pytest.raises(StoreUnavailable, match=r"version 99.*upgrade steerable"):
        await migrate(empty_schema)
    with pytest.raises(StoreUnavailable, match=r"version 99.*upgrade steerable"):
        await PostgresStore(empty_schema).save("s", [user("x")], at=0)


async def test_replicas_migrating_at_once_apply_each_step_once(empty_schema: Any) -> None:
    # Without the advisory lock, concurrent CREATE ... IF NOT EXISTS can collide, and two
    # migrators could both record one version (a primary key violation).
    connections = [await empty_schema.acquire() for _ in range(4)]
    try:
        applied = await asyncio.gather(*(migrate(c) for c in connections))
    finally:
        for connection in connections:
            await empty_schema.release(connection)
    assert sorted(applied) == [[], [], [], [m.version for m in MIGRATIONS]]
    await PostgresStore(empty_schema).check_schema()
    assert await migrate(empty_schema) == []  # and again later: nothing to do


async def test_a_database_of_the_old_schema_script_is_at_version_1(empty_schema: Any) -> None:
    # Releases before the migrations shipped one idempotent script that recorded version 1.
    await empty_schema.execute(
        "CREATE TABLE steerable_schema (version integer PRIMARY KEY,"
        " applied_at timestamptz NOT NULL DEFAULT now());"
        + ";".join(MIGRATIONS[0].steps)
        + "; INSERT INTO steerable_schema (version) VALUES (1)"
    )
    assert await migrate(empty_schema) == [m.version for m in MIGRATIONS[1:]]
    await PostgresStore(empty_schema).check_schema()


def test_the_store_takes_a_pool_not_a_dsn() -> None:
    with pytest.raises(UsageError, match="asyncpg pool"):
        PostgresStore("postgresql://localhost/db")  # type: ignore[arg-type]
