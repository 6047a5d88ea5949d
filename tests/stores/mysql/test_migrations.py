"""What the MySQL store's migrations do beyond every server store's (those:
tests/stores/test_server_migrations.py): the tables' engine and collation, old tables, steps
cut off half way."""

from __future__ import annotations

import json
import warnings
from collections.abc import AsyncIterator
from typing import Any

import pytest

from steerable import codec
from steerable.errors import StoreUnavailable, UsageError
from steerable.messages import user
from steerable.service_store import Input
from steerable.store import Steer
from steerable.stores.mysql import MIGRATIONS, MySQLStore, migrate
from tests.stores.mysql import server

# the procedures of a database at the latest schema: step 8's beside steps 1, 2 and 7's, which a
# steerable of before that is still running calls
_PROCEDURES = [
    *("steerable_save_v1", "steerable_save_v2", "steerable_save_v3"),
    *("steerable_step_v1", "steerable_step_v2", "steerable_step_v3"),
]

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
    assert await migrate(empty) == [4, 5, 6, 7, 8]
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
        assert await migrate(empty) == [5, 6, 7, 8]
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
    assert [name for (name,) in procedures] == _PROCEDURES


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
        assert await migrate(empty) == [6, 7, 8]
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
    assert sorted(name for (name,) in procedures) == _PROCEDURES


async def _call_save(
    pool: Any, version: int, session: str, at: int, take: int, texts: list[str]
) -> Any:
    """What a steerable of an older schema runs for a save: ``steerable_save_v{version}`` (1:
    schema 6's, 2: schema 7's), every answer read."""
    messages = [user(text, id=f"{session}-{at + n}") for n, text in enumerate(texts)]
    batch = json.dumps([[m.id, codec.encode(m)] for m in messages])
    async with pool.acquire() as conn, conn.cursor() as cur:
        call = f"CALL steerable_save_v{version}(%s, %s, %s, %s)"
        await cur.execute(call, (session, at, take, batch))
        rows = await cur.fetchall()
        while await cur.nextset():
            pass
        return rows


async def test_step_7_leaves_the_procedures_a_running_steerable_of_before_calls(
    empty: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a steerable of schema 6 saving, then a migrator of step 7 that died after making the
    # new save (before the step's procedure and the version), then the whole step again
    monkeypatch.setattr("steerable.stores.mysql._migrate.MIGRATIONS", MIGRATIONS[:6])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert await migrate(empty) == [1, 2, 3, 4, 5, 6]
        monkeypatch.undo()
        assert await _call_save(empty, 1, "s", 0, 16, ["one"]) == ()
        for statement in MIGRATIONS[6].steps[:2]:
            await _query(empty, statement)
        assert await migrate(empty) == [7, 8]
    procedures = await _query(
        empty,
        "SELECT ROUTINE_NAME FROM information_schema.ROUTINES"
        " WHERE ROUTINE_SCHEMA = DATABASE() ORDER BY ROUTINE_NAME",
    )
    assert [name for (name,) in procedures] == _PROCEDURES
    store = MySQLStore(empty)
    # the old save still answers its steers (and an empty result set when it took none)
    await store.steer("s", Steer("early", "e1"))
    [(id, _)] = await _call_save(empty, 1, "s", 1, 16, ["two"])
    assert id == b"e1"
    assert await _call_save(empty, 1, "s", 3, 16, ["three"]) == ()
    # the new one, beside it, on the same transcript
    assert await store.save("s", [user("four", id="s-4")], at=4, take=16) == []
    await store.steer("s", Steer("late", "l1"))
    taken = await store.save("s", [user("five", id="s-5")], at=5, take=16)
    assert [(m.id, m.text) for m in taken] == [("l1", "late")]
    texts = [m.text for m in await store.messages("s")]
    assert texts == ["one", "two", "early", "three", "four", "five", "late"]


async def _old_steer(pool: Any, session: str, id: str, text: str) -> None:
    """What a steerable of schema 7 runs for ``steer()`` (the same INSERT as now)."""
    body = codec.encode(Steer(text, id).message())
    await _query(
        pool,
        "INSERT INTO steerable_steers (session, id, body)"
        f" VALUES ('{session}', '{id}', '{body}') ON DUPLICATE KEY UPDATE id = id",
    )


async def test_step_8_marks_the_sessions_of_before_so_no_waiting_steer_is_skipped(
    empty: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # rows of schema 7 made by a steerable of before: "a" saved and has a steer waiting, "b"
    # has a steer and no lock row (steer() made none then), "c" saved and took its steer;
    # then a migrator of step 8 that died after adding the column (before the trigger, the
    # procedures and the version), and a steer an older steerable left meanwhile ("d")
    monkeypatch.setattr("steerable.stores.mysql._migrate.MIGRATIONS", MIGRATIONS[:7])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert await migrate(empty) == [1, 2, 3, 4, 5, 6, 7]
        monkeypatch.undo()
        assert not await _call_save(empty, 2, "a", 0, 16, ["a0"])  # v2 answers no rows
        await _old_steer(empty, "a", "sa", "for a")
        await _old_steer(empty, "b", "sb", "for b")
        await _old_steer(empty, "c", "sc", "for c")
        [(taken, _)] = await _call_save(empty, 2, "c", 0, 16, ["c0"])
        assert taken == b"sc"
        for statement in MIGRATIONS[7].steps[:3]:
            await _query(empty, statement)
        await _old_steer(empty, "d", "sd", "for d")
        assert await migrate(empty) == [8]
    marks = dict(await _query(empty, "SELECT session, steers FROM steerable_sessions"))
    assert marks == {b"a": 1, b"c": 1}  # the rows of before: a steer of theirs may wait
    [(trigger,)] = await _query(
        empty,
        "SELECT TRIGGER_NAME FROM information_schema.TRIGGERS"
        " WHERE TRIGGER_SCHEMA = DATABASE() AND EVENT_OBJECT_TABLE = 'steerable_steers'",
    )
    assert trigger == "steerable_steers_mark"
    procedures = await _query(
        empty,
        "SELECT ROUTINE_NAME FROM information_schema.ROUTINES"
        " WHERE ROUTINE_SCHEMA = DATABASE() ORDER BY ROUTINE_NAME",
    )
    assert [name for (name,) in procedures] == _PROCEDURES
    store = MySQLStore(empty)
    assert [m.id for m in await store.save("a", [user("a1")], at=1, take=16)] == ["sa"]
    assert [m.id for m in await store.save("b", [user("b0")], at=0, take=16)] == ["sb"]
    assert await store.save("c", [user("c1")], at=2, take=16) == []
    assert [m.id for m in await store.save("d", [user("d0")], at=0, take=16)] == ["sd"]
    # a steerable of before still running, beside the new one: its steer() after the new
    # save cleared the mark sets it again (the trigger), its save takes without clearing it
    assert await store.save("a", [user("a3")], at=3, take=16) == []
    await _old_steer(empty, "a", "sa2", "old steer")
    assert [m.id for m in await store.save("a", [user("a4")], at=4, take=16)] == ["sa2"]
    await store.steer("a", Steer("new steer", "sa3"))
    [(taken, _)] = await _call_save(empty, 2, "a", 6, 16, ["a6"])
    assert taken == b"sa3"
    assert await store.save("a", [user("a8")], at=8, take=16) == []
    texts = [m.text for m in await store.messages("a")]
    assert texts == ["a0", "a1", "for a", "a3", "a4", "old steer", "a6", "new steer", "a8"]
