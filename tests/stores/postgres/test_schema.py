"""What the Postgres store's migrations do beyond every server store's (those:
tests/stores/test_server_migrations.py): column types, a failing step, the old script."""

from __future__ import annotations

from typing import Any

import pytest

from steerable.errors import StoreUnavailable, UsageError
from steerable.stores.migrations import Migration
from steerable.stores.postgres import MIGRATIONS, SCHEMA_VERSION, PostgresStore, migrate


async def test_the_tables_keep_no_json(empty_schema: Any) -> None:
    # jsonb would rewrite a body (key order, duplicate keys, spacing)
    await migrate(empty_schema)
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
