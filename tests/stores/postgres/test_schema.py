"""What the Postgres store's migrations do beyond every server store's (those:
tests/stores/test_server_migrations.py): column types, a failing step, the old script."""

from __future__ import annotations

from typing import Any

import pytest

from steerable.errors import StoreUnavailable, UsageError
from steerable.messages import assistant, user
from steerable.service_store import Input
from steerable.store import Steer
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


async def test_a_database_at_version_1_keeps_its_data_through_the_service_tables_step(
    empty_schema: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as earlier:  # the release before the service
        for module in ("_store", "_migrate"):
            earlier.setattr(f"steerable.stores.postgres.{module}.MIGRATIONS", MIGRATIONS[:1])
        assert await migrate(empty_schema) == [1]
        old = PostgresStore(empty_schema)
        await old.save("s", [user("kept"), assistant("too")], at=0)
        await old.steer("s", Steer("still waiting", "w"))
    assert await migrate(empty_schema) == [2, 3]
    store = PostgresStore(empty_schema)
    assert [m.text for m in await store.messages("s")] == ["kept", "too"]
    assert [(s.id, s.text) for s in await store.steers("s")] == [("w", "still waiting")]
    await store.enqueue("s", Input("send", "go", "t"))
    claim = await store.claim("a", seconds=60, cap=16, session="s")
    assert claim is not None and (claim.start, len(claim.messages)) == (2, 2)
    await store.step(claim.lease, [claim.prompt.message(steered=False)], at=2, take=0)
    assert [m.text for m in await store.messages("s")] == ["kept", "too", "go"]


async def test_a_database_at_version_2_lists_its_sessions_after_the_listing_step(
    empty_schema: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as earlier:  # the release before the listing
        for module in ("_store", "_migrate"):
            earlier.setattr(f"steerable.stores.postgres.{module}.MIGRATIONS", MIGRATIONS[:2])
        assert await migrate(empty_schema) == [1, 2]
        old = PostgresStore(empty_schema)
        for name in ("b", "a", "\u00e9"):
            await old.enqueue(name, Input("send", "go"))
    assert await migrate(empty_schema) == [3]
    listed = await PostgresStore(empty_schema).sessions(prefix="", after=None, limit=10)
    assert [(s.session, s.state) for s in listed] == [
        ("a", "queued"),
        ("b", "queued"),
        ("\u00e9", "queued"),
    ]


def test_the_store_takes_a_pool_not_a_dsn() -> None:
    with pytest.raises(UsageError, match="asyncpg pool"):
        PostgresStore("postgresql://localhost/db")  # type: ignore[arg-type]
