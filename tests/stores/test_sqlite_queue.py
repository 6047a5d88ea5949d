"""The SQLite store's queue layout (schema 3, and schema 5's trace context of an input): the
upgrades of a version 2 and a version 4 file with their rows, the stop poll's kept answer,
and the plans of the new reads (the contract's queue cases run in test_sqlite_contract)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

from steerable import codec
from steerable.messages import user
from steerable.service_store import Input, Lease, Outcome
from steerable.stores._sqlite_rows import TURNS
from steerable.stores._sqlite_schema import SCHEMA_VERSION, STEPS
from steerable.stores._sqlite_views import STOPPING, WAITING, WAITING_TOTAL
from steerable.stores.sqlite import SQLiteStore

# -- a version 2 file ---------------------------------------------------------------------


def _version_2(path: Path) -> None:
    """A file as steerable's schema 2 left it: a turn ended, one running, one input queued.

    The tables are the shipped steps 1 and 2 (steps are never edited); the rows are what
    that version's verbs wrote, times in its events only.
    """
    db = sqlite3.connect(path, isolation_level=None)
    for version, statements in STEPS[:2]:
        assert version <= 2
        for statement in statements.split(";"):
            if statement.strip():
                db.execute(statement)
    rows: dict[str, list[tuple[Any, ...]]] = {
        "steerable_messages": [
            ("s", 0, "p1", codec.encode(user("first"))),
            ("s", 1, "k", codec.encode(user("and"))),
            ("s", 2, "p2", codec.encode(user("second"))),
        ],
        "steerable_inputs": [  # session, seq, id, kind, text, offered, ahead, state, turn, step
            ("s", 1, "p1", "send", '"first"', None, 0, "prompt", "p1", None),
            ("s", 2, "k", "steer", '"and"', "p1", 0, "taken", "p1", 1),
            ("s", 3, "p2", "send", '"second"', None, 1, "prompt", "p2", None),
            ("s", 4, "q", "send", '"third"', None, 1, "waiting", None, None),
        ],
        "steerable_turns": [  # session, id, ord, start, cap, state, epoch, steps, taken,
            # offered, stop, end, text, error
            ("s", "p1", 1, 0, 4, "completed", 1, 1, 1, 1, 0, 2, '"done"', None),
            ("s", "p2", 2, 2, 4, "running", 3, 1, 0, 0, 0, None, '""', None),
        ],
        "steerable_service": [("s", 3, "r", 4102444800.0, "p2", 4, 1, 9)],
    }
    events: list[tuple[int, str, str | None, dict[str, Any], float]] = [
        (1, "input", None, {"id": "p1", "kind": "send", "turn": None}, 100.0),
        (2, "turn_started", "p1", {"epoch": 1, "holder": "r", "resumed": False}, 101.0),
        (3, "input", "p1", {"id": "k", "kind": "steer", "turn": "p1"}, 102.0),
        (4, "turn_ended", "p1", {"state": "completed"}, 103.0),
        (5, "input", None, {"id": "p2", "kind": "send", "turn": None}, 104.0),
        (6, "turn_started", "p2", {"epoch": 2, "holder": "r", "resumed": False}, 105.0),
        (7, "holder", "p2", {"holder": "r", "epoch": 3}, 106.0),
        (8, "turn_started", "p2", {"epoch": 3, "holder": "r", "resumed": True}, 106.0),
        (9, "input", None, {"id": "q", "kind": "send", "turn": None}, 107.0),
    ]
    rows["steerable_events"] = [("s", i, k, t, json.dumps(d), at) for i, k, t, d, at in events]
    for table, values in rows.items():
        for row in values:
            db.execute(f"INSERT INTO {table} VALUES ({','.join('?' * len(row))})", row)
    db.execute("PRAGMA user_version = 2")
    db.close()


def _dump(path: Path) -> list[str]:
    db = sqlite3.connect(path)
    try:
        return list(db.iterdump())
    finally:
        db.close()


async def test_a_version_2_file_is_upgraded_with_its_rows_and_their_times(tmp_path: Path) -> None:
    path = tmp_path / "v2.db"
    _version_2(path)
    lease = Lease("s", "r", 3, 4102444800.0)
    async with SQLiteStore(path) as store:
        # the inputs' and turns' times come from the events that recorded them
        inputs = await store.inputs("s", after=0, limit=10)
        assert [(i.id, i.state, i.at, i.metadata, i.trace) for i in inputs] == [
            ("p1", "prompt", 100.0, {}, {}),
            ("k", "taken", 102.0, {}, {}),
            ("p2", "prompt", 104.0, {}, {}),
            ("q", "waiting", 107.0, {}, {}),
        ]
        turns = await store.turns("s", after=0, limit=10)
        assert [(t.id, t.seq, t.state, t.started_at, t.ended_at, t.usage) for t in turns] == [
            ("p1", 1, "completed", 101.0, 103.0, {}),
            ("p2", 3, "running", 105.0, None, {}),  # a takeover does not move the start
        ]
        assert turns[0].text == "done" and turns[1].holder == "r"
        # messages stored before the upgrade kept no time
        entries = await store.transcript("s", after=-1, limit=10)
        assert [(e.message.id, e.turn, e.at) for e in entries] == [
            ("p1", "p1", None),
            ("k", "p1", None),
            ("p2", "p2", None),
        ]
        status = await store.status("s")
        assert [w.id for w in status.waiting] == ["q"]
        assert (status.queued, status.waiting_total, status.metadata) == (1, 1, {})
        # and the service carries on where version 2 left it
        assert await store.stop("s") == "p2"
        assert await store.stopping("r") == ["s"]
        assert await store.end_turn(lease, Outcome("stopped", usage={"input_tokens": 3})) == "q"
        assert (await store.turns("s", after=1, limit=1))[0].usage == {"input_tokens": 3}
        claim = await store.claim("r2", seconds=60, cap=4, session="s")
        assert claim is not None and claim.turn == "q" and claim.lease.epoch == 4
        assert claim.prompt == Input("send", "third", "q")  # no trace: {}
        await store.step(claim.lease, [claim.prompt.message(steered=False)], at=3, take=4)
        last = (await store.transcript("s", after=2, limit=10))[0]
        assert last.message.id == "q" and last.at is not None
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 6
    before = _dump(path)
    async with SQLiteStore(path) as store:  # a file of this version is opened as it is
        assert (await store.status("s")).turn is not None
    assert _dump(path) == before


# -- a version 4 file: the inputs of before have no trace context --------------------------

TRACE = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}


def _version_4(path: Path) -> None:
    """A file as schema 4 left it: turn "t" running under "r" (epoch 1), a steer "s" offered
    to it, a send "u" queued; the steps as shipped, the rows as that version wrote them."""
    db = sqlite3.connect(path, isolation_level=None)
    for version, statements in STEPS[:4]:
        assert version <= 4
        for statement in statements.split(";"):
            if statement.strip():
                db.execute(statement)
    db.execute(
        "INSERT INTO steerable_messages VALUES ('s', 0, 't', ?, 100.0)",
        (codec.encode(user("go", id="t")),),
    )
    columns = "session, seq, id, kind, text, offered, ahead, state, turn, step, at, metadata"
    for row in [
        ("s", 1, "t", "send", '"go"', None, 0, "prompt", "t", None, 100.0, '{"k": 1}'),
        ("s", 2, "s", "steer", '"and"', "t", 0, "waiting", "t", None, 101.0, None),
        ("s", 3, "u", "send", '"next"', None, 1, "waiting", None, None, 102.0, None),
    ]:
        db.execute(f"INSERT INTO steerable_inputs ({columns}) VALUES ({','.join('?' * 12)})", row)
    db.execute(
        "INSERT INTO steerable_turns (session, id, ord, start_position, cap, state, epoch,"
        " steps, offered, seq, started_at) VALUES ('s', 't', 1, 0, 4, 'running', 1, 1, 1, 1,"
        " 100.5)"
    )
    db.execute(
        "INSERT INTO steerable_service (session, epoch, holder, expires, running, inputs,"
        " queued, events) VALUES ('s', 1, 'r', 4102444800.0, 't', 3, 1, 0)"
    )
    db.execute("PRAGMA user_version = 4")
    db.close()


async def test_a_version_4_file_is_upgraded_and_its_inputs_have_no_trace(tmp_path: Path) -> None:
    path = tmp_path / "v4.db"
    _version_4(path)
    async with SQLiteStore(path) as store:
        inputs = await store.inputs("s", after=0, limit=10)
        assert [(i.id, i.state, i.metadata, i.trace) for i in inputs] == [
            ("t", "prompt", {"k": 1}, {}),
            ("s", "waiting", {}, {}),
            ("u", "waiting", {}, {}),
        ]
        assert [w.trace for w in (await store.status("s")).waiting] == [{}, {}]
        view = await store.input("s", "u")
        assert view is not None and view.trace == {}
        await store.enqueue("s", Input("send", "traced", "v", trace=dict(TRACE)))
        # the running turn ends, its steer freed: the steer's turn, then the next, start
        lease = Lease("s", "r", 1, 4102444800.0)
        assert await store.end_turn(lease, Outcome("stopped")) == "s"
        claims = []
        for _ in range(3):
            claim = await store.claim("r2", seconds=60, cap=4, session="s")
            assert claim is not None
            claims.append((claim.turn, claim.prompt.trace))
            await store.end_turn(claim.lease, Outcome("completed"))
        assert claims == [("s", {}), ("u", {}), ("v", TRACE)]
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 6
    before = _dump(path)
    async with SQLiteStore(path) as store:  # a file of this version is opened as it is
        assert (await store.input("s", "v")) is not None
    assert _dump(path) == before


# -- the stop poll --------------------------------------------------------------------------


async def _held(store: SQLiteStore, holder: str, *sessions: str) -> dict[str, Lease]:
    leases = {}
    for sid in sessions:
        await store.enqueue(sid, Input("send", "go", f"{sid}-p"))
        claim = await store.claim(holder, seconds=60, cap=4, session=sid)
        assert claim is not None
        leases[sid] = claim.lease
    return leases


async def test_the_stop_poll_sees_every_change_whoever_wrote_it(tmp_path: Path) -> None:
    # its kept answer must not hide a stop written through this same connection (SQLite's
    # data_version does not change for those) nor one written through another
    path = tmp_path / "s.db"
    async with SQLiteStore(path) as store, SQLiteStore(path) as other:
        leases = await _held(store, "h", "a", "b", "c")
        assert await store.stopping("h") == []
        assert await store.stopping("h") == []  # kept
        await store.stop("b")  # through this store's own connection
        assert await store.stopping("h") == ["b"]
        await other.stop("a")  # through another connection of this process
        assert await store.stopping("h") == ["a", "b"]
        with sqlite3.connect(path) as raw:  # a plain connection, as another process's
            raw.execute("UPDATE steerable_turns SET stop_requested = 1 WHERE id = 'c-p'")
        assert await store.stopping("h") == ["a", "b", "c"]
        assert await store.stopping("someone else") == []
        await other.end_turn(leases["a"], Outcome("stopped"))
        assert await store.stopping("h") == ["b", "c"]
        await store.end_turn(leases["b"], Outcome("stopped"))
        assert await store.stopping("h") == ["c"]
        await store.enqueue("a", Input("send", "again", "a-2"))
        again = await other.claim("h", seconds=60, cap=4, session="a")  # held, not stopping
        assert again is not None and again.turn == "a-2"
        assert await store.stopping("h") == ["c"]
        await other.stop("a")
        assert await store.stopping("h") == ["a", "c"]


async def test_the_stop_poll_asks_only_the_data_version_while_nothing_changed(
    tmp_path: Path,
) -> None:
    async with SQLiteStore(tmp_path / "s.db") as store:
        await _held(store, "h", "a")
        await store.stop("a")
        statements: list[str] = []
        await store._call(lambda db: db.set_trace_callback(statements.append))
        assert await store.stopping("h") == ["a"]
        assert await store.stopping("h") == ["a"]
        assert await store.stopping("h") == ["a"]
        await store._call(lambda db: db.set_trace_callback(None))
    query = STOPPING.replace("?", "'h'")  # as the trace gives it, bound
    assert statements == [
        "PRAGMA data_version",
        query,
        "PRAGMA data_version",
        "PRAGMA data_version",
    ]


# -- plans ----------------------------------------------------------------------------------


def test_the_new_reads_walk_an_index_in_order(tmp_path: Path) -> None:
    # the stop poll reads the holder's sessions only; a status's page and an inputs or
    # turns page read their rows in seq order off an index, never sorting every row (a
    # status of 100 out of 10,000 reads 100 texts)
    path = tmp_path / "plan.db"
    asyncio.run(_open(path))
    cases = [(STOPPING, ("h",)), (WAITING, ("s", 0, 100)), (WAITING_TOTAL, ("s",))]
    cases.append((TURNS, ("s", 0, 10)))
    with sqlite3.connect(path) as db:
        plans = [[r[3] for r in db.execute(f"EXPLAIN QUERY PLAN {sql}", a)] for sql, a in cases]
    assert plans == [
        [
            "SEARCH s USING INDEX steerable_service_holder (holder=?)",
            "SEARCH t USING INDEX sqlite_autoindex_steerable_turns_1 (session=? AND id=?)",
        ],
        ["SEARCH steerable_inputs USING INDEX steerable_inputs_queue (session=? AND seq>?)"],
        ["SEARCH steerable_inputs USING COVERING INDEX steerable_inputs_queue (session=?)"],
        ["SEARCH steerable_turns USING INDEX steerable_turns_seq (session=? AND seq>?)"],
    ]


async def _open(path: Path) -> None:
    async with SQLiteStore(path):
        pass
