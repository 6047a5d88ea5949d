"""What the MySQL store's migrations do beyond every server store's (those:
tests/stores/test_server_migrations.py): the tables' engine and collation, old tables, steps
cut off half way."""

from __future__ import annotations

import warnings
from collections.abc import AsyncIterator
from typing import Any

import pytest

from steerable import codec
from steerable.errors import StoreUnavailable, UsageError
from steerable.messages import user
from steerable.service_store import Input
from steerable.stores.mysql import MIGRATIONS, MySQLStore, migrate
from tests.stores.mysql import server

_LATEST = [m.version for m in MIGRATIONS]


@pytest.fixture
async def empty() -> AsyncIterator[Any]:
    """A pool on a new, empty database of its own, dropped after the test."""
    async with server.scratch_database() as pool:
        yield pool


_query = server.on_pool


def test_the_store_takes_a_pool_not_a_url() -> None:
    with pytest.raises(UsageError, match="aiomysql pool"):
        MySQLStore("mysql://root@localhost/test")  # type: ignore[arg-type]


async def test_the_tables_are_innodb_and_compare_bytes(empty: Any) -> None:
    await migrate(empty)
    tables = await _query(
        empty,
        "SELECT TABLE_NAME, ENGINE, TABLE_COLLATION FROM information_schema.TABLES"
        " WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME <> 'steerable_schema'",
    )
    assert sorted(tables) == [
        (f"steerable_{t}", "InnoDB", "utf8mb4_bin")
        for t in (
            "events",
            "inputs",
            "journal",
            "messages",
            "service",
            "sessions",
            "steers",
            "turns",
        )
    ]


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


async def test_a_database_of_schema_3_gets_the_journal_from_step_4(
    empty: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("steerable.stores.mysql._migrate.MIGRATIONS", MIGRATIONS[:3])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert await migrate(empty) == [1, 2, 3]
    monkeypatch.undo()
    await _query(
        empty,
        "INSERT INTO steerable_messages (session, position, id, body)"
        f" VALUES ('s', 0, 'k', '{codec.encode(user('kept', id='k'))}')",
    )
    store = MySQLStore(empty)
    with pytest.raises(StoreUnavailable, match=r"version 3;.*step 4 \(the tool journal"):
        await store.begin_calls("s", ["k"])
    assert await migrate(empty) == [4, 5, 6]
    assert [m.text for m in await store.messages("s")] == ["kept"]
    assert await store.begin_calls("s", ["k"]) == {}
    assert await store.begin_calls("s", ["k"]) == {"k": None}


async def test_a_step_5_cut_off_half_way_runs_again_whole(
    empty: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a migrator that died after the trace column was added, before the version was
    # recorded and before it dropped its procedure
    monkeypatch.setattr("steerable.stores.mysql._migrate.MIGRATIONS", MIGRATIONS[:4])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert await migrate(empty) == [1, 2, 3, 4]
        monkeypatch.undo()
        for statement in MIGRATIONS[4].steps[:3]:
            await _query(empty, statement)
        assert await migrate(empty) == [5, 6]
    store = MySQLStore(empty)
    trace = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
    await store.enqueue("s", Input("send", "go", "t", trace=trace))
    view = await store.input("s", "t")
    assert view is not None and view.trace == trace
    procedures = await _query(
        empty,
        "SELECT ROUTINE_NAME FROM information_schema.ROUTINES"
        " WHERE ROUTINE_SCHEMA = DATABASE() ORDER BY ROUTINE_NAME",
    )
    assert [name for (name,) in procedures] == ["steerable_save_v1", "steerable_step_v1"]


async def test_step_6_gives_each_service_row_of_before_its_own_mark(
    empty: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # rows of schema 5, then a migrator of step 6 that died after adding the column (before
    # its default, the fill and the version), and a row an older steerable made meanwhile
    monkeypatch.setattr("steerable.stores.mysql._migrate.MIGRATIONS", MIGRATIONS[:5])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert await migrate(empty) == [1, 2, 3, 4, 5]
        monkeypatch.undo()
        await _query(empty, "INSERT INTO steerable_service (session) VALUES ('a'), ('b'), ('c')")
        for statement in MIGRATIONS[5].steps[:3]:
            await _query(empty, statement)
        await _query(empty, "INSERT INTO steerable_service (session) VALUES ('d')")
        made = await _query(empty, "SELECT mark FROM steerable_service WHERE session = 'd'")
        assert list(made) == [(None,)]
        assert await migrate(empty) == [6]
    marks = dict(await _query(empty, "SELECT session, mark FROM steerable_service"))
    assert sorted(marks) == [b"a", b"b", b"c", b"d"]
    assert len(set(marks.values())) == 4 and all(len(m) == 32 for m in marks.values())
    store = MySQLStore(empty)
    await store.enqueue("e", Input("send", "made after"))
    await store.enqueue("a", Input("send", "go"))
    claim = await store.claim("r", seconds=60, cap=16, session="a")
    assert claim is not None and claim.mark == marks[b"a"]
    [(made,)] = await _query(empty, "SELECT mark FROM steerable_service WHERE session = 'e'")
    assert made is not None and made not in marks.values()
    procedures = await _query(
        empty,
        "SELECT ROUTINE_NAME FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = DATABASE()",
    )
    assert sorted(name for (name,) in procedures) == ["steerable_save_v1", "steerable_step_v1"]
