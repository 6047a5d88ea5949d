"""The SQLite store's tool journal and tail swap beyond the contract (its cases run in
test_sqlite_contract): the upgrade of a version 3 file, the journal's stored text, begins and
ends of the same calls from four processes, ``replace`` under the file's write lock against
the store's own save, what it keeps, and the plans of its reads."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from steerable import codec
from steerable.errors import SessionBusy, TranscriptConflict
from steerable.journal import encode_result
from steerable.messages import Message, ToolResult, assistant, user
from steerable.service_store import Input
from steerable.store import Steer
from steerable.stores._sqlite_journal import BEGIN_KNOWN
from steerable.stores._sqlite_schema import SCHEMA_VERSION, STEPS
from steerable.stores.sqlite import TAIL, SQLiteStore
from tests.stores.racing import race


def _dump(path: Path, *tables: str) -> list[tuple[Any, ...]]:
    """The rows of ``tables`` (all of the file's when none), in a stable order."""
    db = sqlite3.connect(path)
    try:
        if not tables:
            return [(line,) for line in db.iterdump()]
        return [
            (table, *row)
            for table in tables
            for row in db.execute(f"SELECT * FROM {table} ORDER BY 1, 2, 3")
        ]
    finally:
        db.close()


def _result(key: str, content: str) -> ToolResult:
    return ToolResult(f"call-{key}", "pay", content)


# -- the layout -----------------------------------------------------------------------------


async def test_a_version_3_file_is_upgraded_with_an_empty_journal(tmp_path: Path) -> None:
    path = tmp_path / "v3.db"
    db = sqlite3.connect(path, isolation_level=None)
    for version, statements in STEPS[:3]:  # the shipped steps, never edited
        assert version <= 3
        for statement in statements.split(";"):
            if statement.strip():
                db.execute(statement)
    db.execute(
        "INSERT INTO steerable_messages VALUES ('s', 0, 'm0', ?, 100.0)",
        (codec.encode(user("hi")),),
    )
    db.execute("PRAGMA user_version = 3")
    db.close()
    async with SQLiteStore(path) as store:
        assert [m.id for m in await store.messages("s")] == ["m0"]
        assert (await store.transcript("s", after=-1, limit=1))[0].at == 100.0
        assert await store.begin_calls("s", ["k"]) == {}
        assert await store.end_call("s", "k", _result("k", "paid")) == _result("k", "paid")
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 6
    before = _dump(path)
    async with SQLiteStore(path) as store:  # a file of this version is opened as it is
        assert await store.begin_calls("s", ["k"]) == {"k": _result("k", "paid")}
    assert _dump(path) == before


async def test_a_result_is_kept_as_its_stored_text(tmp_path: Path) -> None:
    # the codec's text itself, not a JSON value the database would normalize (key order,
    # spaces, duplicate keys inside the content are the tool's own)
    path = tmp_path / "s.db"
    result = _result("k", '{"z":1,  "a":2, "z":3}')
    async with SQLiteStore(path) as store:
        await store.begin_calls("s", ["k", "started"])
        await store.end_call("s", "k", result)
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT key, result, typeof(result) FROM steerable_journal ORDER BY key")
        assert rows.fetchall() == [
            ("k", encode_result("k", result), "text"),
            ("started", None, "null"),
        ]


async def test_a_delete_refused_while_a_turn_runs_leaves_the_journal(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "s.db") as store:
        await store.end_call("s", "k", _result("k", "paid"))
        await store.enqueue("s", Input("send", "go"))
        assert await store.claim("r", seconds=60, cap=4, session="s") is not None
        # and the journal is written while the turn runs: it is not fenced
        assert await store.begin_calls("s", ["k", "new"]) == {"k": _result("k", "paid")}
        with pytest.raises(SessionBusy):
            await store.delete("s")
        assert await store.begin_calls("s", ["k", "new"]) == {
            "k": _result("k", "paid"),
            "new": None,
        }


def test_the_journal_and_the_tail_are_read_through_their_indexes(tmp_path: Path) -> None:
    path = tmp_path / "plan.db"
    asyncio.run(_open(path))
    with sqlite3.connect(path) as db:
        known = db.execute(
            f"EXPLAIN QUERY PLAN {BEGIN_KNOWN.format(marks='?,?')}", ("s", "a", "b")
        ).fetchall()
        tail = db.execute(f"EXPLAIN QUERY PLAN {TAIL}", ("s", 3)).fetchall()
    assert [row[3] for row in known] == [
        "SEARCH steerable_journal USING INDEX sqlite_autoindex_steerable_journal_1"
        " (session=? AND key=?)"
    ]
    assert [row[3] for row in tail] == [  # no sort: the index is in position order
        "SEARCH steerable_messages USING INDEX steerable_messages_position"
        " (session=? AND position>?)"
    ]


async def _open(path: Path) -> None:
    async with SQLiteStore(path):
        pass


# -- the journal from four processes --------------------------------------------------------


def _journaler(path: Path, name: str, keys: list[str], together: Any, out: Any) -> None:
    """A process beginning each call of ``keys`` at once with the other processes
    (``together``, a barrier), then ending it with a result of its own: the keys it was told
    were new, and the result each end answered."""

    async def main() -> tuple[str, list[str], dict[str, str]]:
        new: list[str] = []
        kept: dict[str, str] = {}
        loop = asyncio.get_running_loop()
        async with SQLiteStore(path) as store:
            await store.steers("warm")  # connected before the race starts
            for key in keys:
                await loop.run_in_executor(None, together.wait, 60)
                if key not in await store.begin_calls("s", [key, f"{name}-{key}"]):
                    new.append(key)
                kept[key] = (await store.end_call("s", key, _result(key, name))).content
        return name, new, kept

    try:
        out.put(asyncio.run(main()))
    except BaseException as exc:  # the parent fails fast with the real error
        out.put(f"journaler failed: {exc!r}")
        raise


async def test_begins_of_the_same_calls_from_four_processes_tell_each_new_once(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    keys = [f"k{i}" for i in range(40)]
    async with SQLiteStore(path) as store:
        got = await race(_journaler, [(path, f"p{n}", keys) for n in range(4)])
        told_new = sorted(key for _, new, _ in got for key in new)
        assert told_new == sorted(keys)  # each call new to exactly one process
        assert sum(1 for _, new, _ in got if new) >= 2, "one process began everything: no race"
        stored = await store.begin_calls("s", keys)
        assert stored.keys() == set(keys)
        for key, result in stored.items():  # every end of a call answered the one result kept
            assert result is not None
            assert {kept[key] for _, _, kept in got} == {result.content}
        for name, _, _ in got:  # each process's own key was begun by it
            assert await store.begin_calls("s", [f"{name}-k0"]) == {f"{name}-k0": None}


# -- replace under the write lock -----------------------------------------------------------


async def _five(store: SQLiteStore, sid: str) -> list[Message]:
    messages = [user("plan"), assistant("call"), user("two"), assistant("three"), user("four")]
    await store.save(sid, messages, at=0)
    return messages


async def test_no_save_comes_between_replace_s_compare_and_its_swap(tmp_path: Path) -> None:
    # at each statement the store runs after reading the tail it compares, the test asks
    # whether the file's write lock is free (a probe that does not wait) and, if it is, lets
    # a real save at the old end in from another store object (another connection, as
    # another process would be); the replace must hold the lock from its compare to its
    # commit, so that save never gets in and, tried afterwards, is a conflict. Were the
    # compare and the swap two transactions, the save would land between them and the
    # swap would drop it.
    path = tmp_path / "s.db"
    async with SQLiteStore(path) as store, SQLiteStore(path) as other:
        messages = await _five(store, "s")
        await other.steers("warm")
        loop = asyncio.get_running_loop()
        probe = sqlite3.connect(path, isolation_level=None, timeout=0, check_same_thread=False)
        compared = threading.Event()
        got_in: list[str] = []  # the statement before which a save got in

        def at_each_statement(sql: str) -> None:  # on the store's worker thread
            if sql.startswith(TAIL.split(" WHERE")[0]):
                compared.set()
                return
            if not compared.is_set() or got_in:
                return
            try:
                probe.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError:  # "database is locked": the replace holds it
                return
            probe.rollback()
            got_in.append(sql)
            save = other.save("s", [assistant("five")], at=5)
            asyncio.run_coroutine_threadsafe(save, loop).result(timeout=10)

        await store._call(lambda db: db.set_trace_callback(at_each_statement))
        try:
            await store.replace("s", at=2, old=[m.id for m in messages[2:]], messages=[user("x")])
        finally:
            await store._call(lambda db: db.set_trace_callback(None))
            probe.close()
        assert compared.is_set(), "the replace never compared the tail"
        assert got_in == [], "a save got in between the compare and the swap"
        with pytest.raises(TranscriptConflict):
            await other.save("s", [assistant("five")], at=5)
        assert [m.text for m in await store.messages("s")] == ["plan", "call", "x"]


def _waiting_in(function: str, count: int) -> bool:
    """Whether ``count`` store worker threads are inside ``function`` (waiting for the lock)."""
    frames = sys._current_frames()
    inside = 0
    for thread in threading.enumerate():
        frame = (
            frames.get(thread.ident or 0) if thread.name.startswith("steerable-sqlite") else None
        )
        while frame is not None and frame.f_code.co_name != function:
            frame = frame.f_back
        inside += frame is not None
    return inside >= count


async def _until_waiting(function: str, count: int) -> None:
    for _ in range(2000):  # a bounded poll
        if _waiting_in(function, count):
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"{count} calls never waited in {function}")


async def test_replaces_and_saves_queued_on_the_write_lock_let_one_win(tmp_path: Path) -> None:
    # two replaces of one tail and a save at its end, all three waiting for the file's write
    # lock (held by the test's own connection) before they read: whichever gets it first
    # wins, the other two then read the changed transcript and are conflicts
    path = tmp_path / "s.db"
    winners: set[str] = set()
    async with (
        SQLiteStore(path) as store,
        SQLiteStore(path) as second,
        SQLiteStore(path) as third,
    ):
        await second.steers("warm")
        await third.steers("warm")
        for round in range(6):
            sid = f"s{round}"
            messages = await _five(store, sid)
            old = [m.id for m in messages[2:]]
            lock = sqlite3.connect(path, isolation_level=None)
            try:
                lock.execute("BEGIN IMMEDIATE")
                calls = {
                    "save": asyncio.ensure_future(third.save(sid, [assistant("five")], at=5)),
                    "mine": asyncio.ensure_future(
                        store.replace(sid, at=2, old=old, messages=[user("mine")])
                    ),
                    "theirs": asyncio.ensure_future(
                        second.replace(sid, at=2, old=old, messages=[user("theirs")])
                    ),
                }
                await _until_waiting("_append", 1)
                await _until_waiting("_replace", 2)
            finally:
                lock.rollback()
                lock.close()
            answers = await asyncio.gather(*calls.values(), return_exceptions=True)
            outcomes = dict(zip(calls, answers, strict=True))
            won = [name for name, o in outcomes.items() if not isinstance(o, TranscriptConflict)]
            assert len(won) == 1, outcomes
            winners.update(won)
            texts = [m.text for m in await store.messages(sid)]
            assert (
                texts
                == {
                    "save": ["plan", "call", "two", "three", "four", "five"],
                    "mine": ["plan", "call", "mine"],
                    "theirs": ["plan", "call", "theirs"],
                }[won[0]]
            )


async def test_replace_keeps_the_kept_rows_and_the_service_s_rows(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with SQLiteStore(path) as store:
        await store.enqueue("s", Input("send", "go", "p"))
        claim = await store.claim("r", seconds=60, cap=4, session="s")
        assert claim is not None
        prompt = claim.prompt.message(steered=False)
        await store.step(claim.lease, [prompt, assistant("one"), user("two")], at=0, take=0)
        await store.steer("s", Steer("taken", "t1"))
        await store.steer("s", Steer("taken too", "t2"))
        await store.take_steers("s", at=3, limit=2)
        await store.steer("s", Steer("later", "w2"))
        before = await store.transcript("s", after=-1, limit=10)
        service = _dump(
            path, "steerable_steers", "steerable_inputs", "steerable_turns", "steerable_events"
        )
        await asyncio.sleep(0.01)  # the new rows' time is their own
        # not refused while the turn runs, unlike truncate; the steered marks are kept
        swapped = [user("in two's place"), before[3].message, before[4].message]
        await store.replace("s", at=2, old=[e.message.id for e in before[2:]], messages=swapped)
        after = await store.transcript("s", after=-1, limit=10)
        assert [e.message for e in after] == [before[0].message, before[1].message, *swapped]
        assert [(e.position, e.at, e.turn) for e in after[:2]] == [
            (e.position, e.at, e.turn) for e in before[:2]
        ]
        last = before[-1].at
        assert last is not None
        assert all(e.at is not None and e.at > last for e in after[2:])
        assert [e.position for e in after] == [0, 1, 2, 3, 4]
        assert (
            _dump(
                path, "steerable_steers", "steerable_inputs", "steerable_turns", "steerable_events"
            )
            == service
        )
        assert [s.id for s in await store.steers("s")] == ["w2"]
        # the turn goes on at the new length
        with pytest.raises(TranscriptConflict):
            await store.step(claim.lease, [assistant("stale")], at=6, take=0)
        await store.step(claim.lease, [assistant("on")], at=5, take=0)
        assert (await store.messages("s"))[-1].text == "on"
