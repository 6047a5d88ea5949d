"""The SQLite store's own options and connection settings (the contract: test_sqlite_contract)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from steerable.errors import UsageError
from steerable.messages import user
from steerable.stores.sqlite import SQLiteStore


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"path": 42}, "file path"),
        ({"path": "x.db", "synchronous": "OFF"}, "synchronous"),
        ({"path": "x.db", "synchronous": "FULL; DROP TABLE x"}, "synchronous"),
        ({"path": "x.db", "busy_timeout": "30"}, "busy_timeout"),
        ({"path": "x.db", "busy_timeout": -1}, "busy_timeout"),
    ],
)
def test_sqlite_store_options_are_usage_errors_never_type_errors(
    kwargs: dict[str, Any], match: str
) -> None:
    with pytest.raises(UsageError, match=match):
        SQLiteStore(**kwargs)


@pytest.mark.parametrize(("mode", "level"), [("NORMAL", 1), ("FULL", 2)])
async def test_sqlite_synchronous_is_really_set_on_the_store_connection(
    tmp_path: Path, mode: Any, level: int
) -> None:
    async with SQLiteStore(tmp_path / "s.db", synchronous=mode) as store:
        await store.save("s", [user("x")], at=0)
        # PRAGMA synchronous belongs to a connection: read it back from the store's own
        got = await store._call(lambda db: db.execute("PRAGMA synchronous").fetchone()[0])
    assert got == level
    with sqlite3.connect(tmp_path / "s.db") as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
