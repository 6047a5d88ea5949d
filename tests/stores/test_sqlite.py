"""The SQLite store's own options, connection settings, schema upgrade and service tables
(the contracts: test_sqlite_contract)."""

from __future__ import annotations

import asyncio
import multiprocessing
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from steerable import codec
from steerable.errors import Fenced, SessionExists, StoreUnavailable, UsageError
from steerable.messages import assistant, user
from steerable.service_store import Input, Outcome
from steerable.store import Steer
from steerable.stores._sqlite_rows import LENGTH
from steerable.stores._sqlite_service import CLAIMABLE
from steerable.stores.sqlite import FORK_COPY, SCHEMA_VERSION, SQLiteStore
from tests.stores.racing import race


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


# -- the service's tables ---------------------------------------------------------------

# The tables of schema version 1 as that version created them, frozen here: the file an
# older steerable left behind.
_VERSION_1 = """
CREATE TABLE steerable_messages (
    session  TEXT    NOT NULL,
    position INTEGER NOT NULL,
    id       TEXT    NOT NULL,
    body     TEXT    NOT NULL
);
CREATE UNIQUE INDEX steerable_messages_position ON steerable_messages (session, position);
CREATE UNIQUE INDEX steerable_messages_id ON steerable_messages (session, id);
CREATE TABLE steerable_steers (
    seq     INTEGER PRIMARY KEY AUTOINCREMENT,
    session TEXT    NOT NULL,
    id      TEXT    NOT NULL,
    text    TEXT    NOT NULL,
    taken   INTEGER NOT NULL DEFAULT 0,
    UNIQUE (session, id)
);
CREATE INDEX steerable_steers_waiting ON steerable_steers (session, taken, seq);
PRAGMA user_version = 1;
"""


def _tables(path: Path) -> list[str]:
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        return [name for (name,) in rows if name.startswith("steerable_")]


def _dump(path: Path) -> list[str]:
    db = sqlite3.connect(path)
    try:
        return list(db.iterdump())
    finally:
        db.close()


async def test_a_version_1_file_is_upgraded_on_open_and_keeps_its_data(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    with sqlite3.connect(path) as db:
        db.executescript(_VERSION_1)
        db.execute(
            "INSERT INTO steerable_messages VALUES ('s', 0, 'm0', ?)", (codec.encode(user("hi")),)
        )
        db.execute("INSERT INTO steerable_steers (session, id, text) VALUES ('s', 'k', 'wait')")
    async with SQLiteStore(path) as store:
        assert [m.text for m in await store.messages("s")] == ["hi"]
        assert [(s.id, s.text) for s in await store.steers("s")] == [("k", "wait")]
        await store.enqueue("s", Input("send", "go", "p"))
        claim = await store.claim("a", seconds=60, cap=16, session="s")
        assert claim is not None and (claim.turn, claim.start) == ("p", 1)
        await store.step(claim.lease, [claim.prompt.message(steered=False)], at=1, take=0)
        assert [m.id for m in await store.messages("s")] == ["m0", "p"]
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 6
    assert _tables(path) == [
        "steerable_events",
        "steerable_inputs",
        "steerable_journal",
        "steerable_messages",
        "steerable_service",
        "steerable_steers",
        "steerable_turns",
    ]
    before = _dump(path)
    async with SQLiteStore(path) as store:  # a file of this version is opened as it is
        assert (await store.status("s")).turn is not None
    assert _dump(path) == before


async def test_a_file_of_a_newer_schema_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "v9.db"
    with sqlite3.connect(path) as db:
        db.executescript(_VERSION_1.replace("user_version = 1", "user_version = 9"))
    before = _dump(path)
    with pytest.raises(StoreUnavailable, match=r"schema 9.*upgrade steerable"):
        async with SQLiteStore(path):
            pass
    assert _dump(path) == before


def test_a_scanning_claim_and_a_step_read_indexes_not_tables(tmp_path: Path) -> None:
    # the claim scan reads the partial index of the sessions with work (never the idle
    # ones), a step's length comes from the position index (never the transcript)
    path = tmp_path / "plan.db"
    asyncio.run(_open(path))
    with sqlite3.connect(path) as db:
        scan = db.execute(f"EXPLAIN QUERY PLAN {CLAIMABLE}", (0.0,)).fetchall()
        length = db.execute(f"EXPLAIN QUERY PLAN {LENGTH}", ("s",)).fetchall()
    assert [row[3] for row in scan] == [
        "SEARCH steerable_service USING INDEX steerable_service_work (expires<?)"
    ]
    assert [row[3] for row in length] == [
        "SEARCH steerable_messages USING COVERING INDEX steerable_messages_position (session=?)"
    ]


def test_a_fork_copies_through_the_position_index(tmp_path: Path) -> None:
    # the copy reads the old session's rows through the position, never the whole table
    path = tmp_path / "plan.db"
    asyncio.run(_open(path))
    with sqlite3.connect(path) as db:
        copy = db.execute(f"EXPLAIN QUERY PLAN {FORK_COPY}", ("new", "old", 9)).fetchall()
    assert "SEARCH steerable_messages USING INDEX steerable_messages_position" in " | ".join(
        row[3] for row in copy
    )
    assert not [row[3] for row in copy if row[3].startswith("SCAN steerable_messages")]


async def _open(path: Path) -> None:
    async with SQLiteStore(path):
        pass


async def test_a_scanning_claim_passes_a_session_whose_lease_is_live(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "s.db") as store:
        await store.enqueue("busy", Input("send", "one"))
        await store.enqueue("busy", Input("send", "two"))  # work, under a live lease
        assert await store.claim("a", seconds=60, cap=16) is not None
        assert await store.claim("b", seconds=60, cap=16) is None
        await store.enqueue("idle", Input("send", "three"))
        claim = await store.claim("b", seconds=60, cap=16)
        assert claim is not None and claim.lease.session == "idle"


async def test_the_claim_scan_s_index_holds_only_the_sessions_with_work(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with SQLiteStore(path) as store:
        for i in range(30):  # sessions whose turns all ended: idle for ever
            await store.enqueue(f"done{i}", Input("send", "one"))
            claim = await store.claim("a", seconds=60, cap=16, session=f"done{i}")
            assert claim is not None
            await store.end_turn(claim.lease, Outcome("completed"))
        await store.enqueue("queued", Input("send", "waits"))
        await store.enqueue("running", Input("send", "runs"))
        assert await store.claim("a", seconds=60, cap=16, session="running") is not None
    with sqlite3.connect(path) as db:
        (entries,) = db.execute(
            "SELECT SUM(ncell) FROM dbstat WHERE name = 'steerable_service_work'"
            " AND pagetype = 'leaf'"
        ).fetchone()
    assert entries == 2


async def test_a_stale_epoch_of_the_same_holder_writes_nothing_to_the_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    async with SQLiteStore(path) as store:
        await store.enqueue("s", Input("send", "go"))
        old = await store.claim("a", seconds=0.2, cap=16, session="s")
        assert old is not None
        await store.enqueue("s", Input("steer", "offered"))
        for _ in range(200):  # the same holder claims again once its lease expired
            new = await store.claim("a", seconds=60, cap=16, session="s")
            if new is not None:
                break
            await asyncio.sleep(0.01)
        assert new is not None and new.lease.epoch == old.lease.epoch + 1
        before = _dump(path)
        with pytest.raises(Fenced):
            await store.step(old.lease, [old.prompt.message(steered=False)], at=0, take=16)
        with pytest.raises(Fenced):
            await store.renew(old.lease, seconds=60)
        with pytest.raises(Fenced):
            await store.end_turn(old.lease, Outcome("completed", "stale"))
        assert _dump(path) == before


def _claimer(path: Path, holder: str, go: Any, out: Any) -> None:
    """A replica in its own process: claim any session, run its turn in one step, end it."""

    async def main() -> list[str]:
        turns: list[str] = []
        async with SQLiteStore(path) as store:
            await store.status("warm")  # connected before the race starts
            out.put("ready")
            await asyncio.get_running_loop().run_in_executor(None, go.wait, 60)
            while (claim := await store.claim(holder, seconds=60, cap=16)) is not None:
                prompt = claim.prompt.message(steered=False)
                await store.step(claim.lease, [prompt], at=len(claim.messages), take=16)
                await store.end_turn(claim.lease, Outcome("completed", holder))
                turns.append(f"{claim.lease.session}/{claim.turn}")
        return turns

    try:
        out.put(asyncio.run(main()))
    except BaseException as exc:  # the parent fails fast with the real error
        out.put(f"claimer failed: {exc!r}")
        raise


async def test_claimers_in_four_processes_run_each_turn_once(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    expected = sorted(f"s{i}/{s}-{n}" for i in range(20) for s in (f"s{i}",) for n in (1, 2))
    async with SQLiteStore(path) as store:
        for i in range(20):
            for n in (1, 2):
                await store.enqueue(f"s{i}", Input("send", f"input {n}", f"s{i}-{n}"))
        context = multiprocessing.get_context("spawn")
        out, go = context.Queue(), context.Event()
        workers = [
            context.Process(target=_claimer, args=(path, f"r{k}", go, out)) for k in range(4)
        ]
        loop = asyncio.get_running_loop()
        for worker in workers:
            worker.start()
        try:
            for _ in workers:
                assert await loop.run_in_executor(None, out.get, True, 120) == "ready"
            go.set()
            results = [await loop.run_in_executor(None, out.get, True, 120) for _ in workers]
            for got in results:
                assert isinstance(got, list), got
        finally:
            go.set()
            for worker in workers:
                await loop.run_in_executor(None, worker.join, 30)
                if worker.is_alive():
                    worker.kill()
        assert sorted(t for r in results for t in r) == expected
        assert sum(1 for r in results if r) >= 2, "one process claimed everything: no race"
        for i in range(20):
            started = [
                e
                for e in await store.events(f"s{i}", after=0, limit=100)
                if e.kind == "turn_started"
            ]
            assert [(e.turn, e.data["epoch"]) for e in started] == [(f"s{i}-1", 1), (f"s{i}-2", 2)]
            assert [m.id for m in await store.messages(f"s{i}")] == [f"s{i}-1", f"s{i}-2"]


async def test_a_fork_keeps_each_message_s_stored_time(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "s.db") as store:
        messages = [user("one"), assistant("two"), user("three")]
        for position, message in enumerate(messages):
            await store.save("old", [message], at=position)
            await asyncio.sleep(0.01)  # each a time of its own
        assert await store.fork("old", "new", through=messages[1].id) == 2
        old = await store.transcript("old", after=-1, limit=10)
        new = await store.transcript("new", after=-1, limit=10)
    assert len({e.at for e in old}) == 3
    assert [(e.position, e.message, e.at) for e in new] == [
        (e.position, e.message, e.at) for e in old[:2]
    ]


def _forker(path: Path, source: str, targets: list[str], together: Any, out: Any) -> None:
    """A process forking ``source`` into each of ``targets``, each fork started at once with
    the other processes' (``together``, a barrier); the source and the targets it won."""

    async def main() -> tuple[str, list[str]]:
        won: list[str] = []
        loop = asyncio.get_running_loop()
        async with SQLiteStore(path) as store:
            await store.steers("warm")  # connected before the race starts
            for target in targets:
                await loop.run_in_executor(None, together.wait, 60)
                try:
                    await store.fork(source, target)
                except SessionExists:
                    continue
                won.append(target)
        return source, won

    try:
        out.put(asyncio.run(main()))
    except BaseException as exc:  # the parent fails fast with the real error
        out.put(f"forker failed: {exc!r}")
        raise


async def test_forks_into_the_same_sessions_from_four_processes_make_each_once(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    targets = [f"t{i}" for i in range(40)]
    async with SQLiteStore(path) as store:
        for k in range(4):  # sources of different lengths: a target shows who won it
            await store.save(f"s{k}", [user(f"s{k} m{n}") for n in range(k + 1)], at=0)
        got = await race(_forker, [(path, f"s{k}", targets) for k in range(4)])
        won: dict[str, list[str]] = dict(got)
        assert sorted(t for ts in won.values() for t in ts) == sorted(targets)  # each won once
        assert sum(1 for ts in won.values() if ts) >= 2, "one process won everything: no race"
        for source, wins in won.items():
            for target in wins:  # whole, and the winner's
                assert await store.messages(target) == await store.messages(source)


async def test_a_deleted_session_is_free_for_a_fork_again(tmp_path: Path) -> None:
    # delete keeps the session's service row (its epoch): that row alone is nothing
    async with SQLiteStore(tmp_path / "s.db") as store:
        await store.save("old", [user("one"), assistant("two")], at=0)
        await store.save("gone", [user("mine")], at=0)
        await store.steer("gone", Steer("a steer", "w1"))
        await store.enqueue("gone", Input("send", "queued"))
        await store.set_metadata("gone", {"title": "gone"})
        with pytest.raises(SessionExists):
            await store.fork("old", "gone")
        assert await store.delete("gone")
        assert await store.fork("old", "gone") == 2
        assert await store.messages("gone") == await store.messages("old")
