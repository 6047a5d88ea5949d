"""The exported DDL, the schema check, and the import that names its extra."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import pytest

import steerable.stores.postgres as postgres
from steerable.errors import StoreUnavailable, UsageError
from steerable.messages import user
from steerable.stores.postgres import SCHEMA, SCHEMA_VERSION, PostgresStore


def test_the_package_exports_exactly_its_public_names() -> None:
    assert sorted(postgres.__all__) == ["Pool", "PostgresStore", "SCHEMA", "SCHEMA_VERSION"]


async def test_the_applied_schema_passes_the_check_and_keeps_no_json(store: PostgresStore) -> None:
    await store.check_schema()
    types = await store.pool.fetch(
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


async def test_a_database_without_the_schema_is_named_unavailable(empty_schema: Any) -> None:
    store = PostgresStore(empty_schema)
    with pytest.raises(StoreUnavailable, match=f"schema version {SCHEMA_VERSION}"):
        await store.check_schema()
    with pytest.raises(StoreUnavailable, match=r"stores\.postgres\.SCHEMA"):
        await store.save("s", [user("x")], at=0)


async def test_a_newer_schema_asks_for_a_newer_steerable(empty_schema: Any) -> None:
    await empty_schema.execute(SCHEMA)
    await empty_schema.execute("INSERT INTO steerable_schema (version) VALUES (99)")
    with pytest.raises(StoreUnavailable, match=r"version 99.*upgrade steerable"):
        await PostgresStore(empty_schema).check_schema()


async def test_replicas_applying_the_schema_at_once_all_succeed(empty_schema: Any) -> None:
    # Without the script's advisory lock, concurrent CREATE ... IF NOT EXISTS can collide.
    connections = [await empty_schema.acquire() for _ in range(4)]
    try:
        await asyncio.gather(*(c.execute(SCHEMA) for c in connections))
    finally:
        for connection in connections:
            await empty_schema.release(connection)
    await PostgresStore(empty_schema).check_schema()
    await empty_schema.execute(SCHEMA)  # and again later: it is idempotent


def test_the_store_takes_a_pool_not_a_dsn() -> None:
    with pytest.raises(UsageError, match="asyncpg pool"):
        PostgresStore("postgresql://localhost/db")  # type: ignore[arg-type]


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )


def test_without_asyncpg_the_import_names_the_extra() -> None:
    result = _python(
        "import sys; sys.modules['asyncpg'] = None\n"
        "import steerable, steerable.stores\n"
        "try:\n    import steerable.stores.postgres\n"
        "except ImportError as exc:\n    print(exc)\n"
    )
    assert "pip install 'steerable[postgres]'" in result.stdout, result.stderr


def test_importing_steerable_loads_no_postgres_driver() -> None:
    result = _python("import sys, steerable, steerable.stores; print('asyncpg' in sys.modules)")
    assert result.stdout.strip() == "False", result.stderr
