"""The SQLite store's two connections: short writes on the loop's thread, the rest on the
worker, the fall-back when the file is busy, and checkpoints off the loop."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import threading
import weakref
from pathlib import Path

import pytest

from steerable.errors import StoreUnavailable
from steerable.messages import Message, assistant, user
from steerable.service_store import Input, Outcome
from steerable.store import Steer
from steerable.stores._sqlite_connections import CHECKPOINT_EVERY, SHORT_BYTES
from steerable.stores.sqlite import APPEND_LOOK, SQLiteStore


class _Threads:
    """The thread each statement of a connection ran on (a trace callback)."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, str]] = []

    def __call__(self, sql: str) -> None:
        self.seen.append((threading.get_ident(), sql))

    def of(self, prefix: str) -> set[int]:
        return {thread for thread, sql in self.seen if sql.startswith(prefix)}


async def _traced(store: SQLiteStore) -> tuple[_Threads, _Threads, int]:
    """Traces of the loop's connection and of the worker's, and the worker thread's id."""
    fast, worker = _Threads(), _Threads()
    assert store._connections.fast is not None
    store._connections.fast.set_trace_callback(fast)
    await store._call(lambda db: db.set_trace_callback(worker))
    worker_thread = await store._call(lambda db: threading.get_ident())
    return fast, worker, worker_thread


async def test_short_writes_run_on_the_loop_s_thread_and_the_rest_on_the_worker(
    tmp_path: Path,
) -> None:
    loop_thread = threading.get_ident()
    async with SQLiteStore(tmp_path / "s.db") as store:
        fast, worker, worker_thread = await _traced(store)
        await store.save("s", [user("hi")], at=0)
        await store.steer("s", Steer("a steer", "w1"))
        assert [m.id for m in await store.take_steers("s", at=None, limit=4)] == ["w1"]
        await store.enqueue("q", Input("send", "go", "p"))
        claim = await store.claim("h", seconds=60, cap=16, session="q")  # reads: the worker
        assert claim is not None
        await store.step(claim.lease, [claim.prompt.message(steered=False)], at=0, take=16)
        await store.renew(claim.lease, seconds=60)
        await store.end_turn(claim.lease, Outcome("completed"))
        await store.begin_calls("s", ["k"])
        long = assistant("x" * (SHORT_BYTES + 1))  # too long for the loop's thread
        await store.save("s", [long], at=2)
        assert [m.id for m in await store.messages("s")][-1] == long.id
    assert fast.of("BEGIN IMMEDIATE") == {loop_thread}
    assert len([sql for _, sql in fast.seen if sql == "BEGIN IMMEDIATE"]) == 7
    assert fast.of("INSERT OR IGNORE INTO steerable_steers") == {loop_thread}
    # the claim, the reads and the long save: the worker only
    assert worker.of("BEGIN IMMEDIATE") == {worker_thread}
    assert len([sql for _, sql in worker.seen if sql == "BEGIN IMMEDIATE"]) == 2
    assert worker.of("SELECT position, id, body FROM steerable_messages") == {worker_thread}


@pytest.mark.parametrize(("mode", "level"), [("NORMAL", 1), ("FULL", 2)])
async def test_the_loop_s_connection_never_waits_nor_checkpoints_and_full_has_none(
    tmp_path: Path, mode: str, level: int
) -> None:
    async with SQLiteStore(tmp_path / "s.db", synchronous=mode) as store:  # type: ignore[arg-type]
        fast = store._connections.fast
        worker = await store._call(
            lambda db: [
                db.execute(f"PRAGMA {name}").fetchone()[0]
                for name in ("busy_timeout", "wal_autocheckpoint", "synchronous")
            ]
        )
        assert worker == [30000, 1000, level]
        if mode == "FULL":  # a commit waits for the disk: never on the loop's thread
            assert fast is None
            return
        assert fast is not None
        got = [
            fast.execute(f"PRAGMA {name}").fetchone()[0]
            for name in ("busy_timeout", "wal_autocheckpoint", "synchronous")
        ]
    assert got == [0, 0, 1]


async def test_a_full_store_writes_every_save_on_the_worker(tmp_path: Path) -> None:
    loop_thread = threading.get_ident()
    async with SQLiteStore(tmp_path / "s.db", synchronous="FULL") as store:
        worker = _Threads()
        await store._call(lambda db: db.set_trace_callback(worker))
        await store.save("s", [user("hi")], at=0)
        await store.steer("s", Steer("a steer", "w1"))
    assert worker.of("BEGIN IMMEDIATE")
    assert loop_thread not in worker.of("")


def _waiting_in(function: str) -> bool:
    """Whether the store's worker thread is inside ``function`` (waiting for the lock)."""
    frames = sys._current_frames()
    for thread in threading.enumerate():
        frame = (
            frames.get(thread.ident or 0) if thread.name.startswith("steerable-sqlite") else None
        )
        while frame is not None:
            if frame.f_code.co_name == function:
                return True
            frame = frame.f_back
    return False


async def _until_waiting_in(function: str) -> None:
    for _ in range(2000):
        if _waiting_in(function):
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"no worker thread waited in {function}")


async def test_a_write_that_finds_the_file_locked_waits_on_the_worker_and_is_kept(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    async with SQLiteStore(path) as store:
        await store.save("s", [user("one")], at=0)
        await store.enqueue("q", Input("send", "go", "p"))
        claim = await store.claim("h", seconds=60, cap=16, session="q")
        assert claim is not None
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another connection holds the write lock
        try:
            two: list[Message] = [assistant("two"), user("three")]
            save = asyncio.create_task(store.save("s", two, at=1))
            await _until_waiting_in("_append")  # on the worker, in SQLite's busy wait
            assert not save.done()
            step = asyncio.create_task(
                store.step(claim.lease, [claim.prompt.message(steered=False)], at=0, take=16)
            )
            await asyncio.sleep(0.05)
            assert not step.done()  # queued behind the save, never refused
        finally:
            other.rollback()
            other.close()
        assert await save == []
        assert await step == []
        assert [m.text for m in await store.messages("s")] == ["one", "two", "three"]
        assert [m.id for m in await store.messages("q")] == ["p"]
        # the loop's connection is free again: the next write runs there, once
        await store.save("s", [assistant("four")], at=3)
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT COUNT(*) FROM steerable_messages WHERE session = 's'")
        assert rows.fetchone()[0] == 4


async def test_a_busy_file_past_the_busy_timeout_is_store_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with SQLiteStore(path, busy_timeout=0.05) as store:
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(StoreUnavailable, match="locked"):
                await store.save("s", [user("one")], at=0)
        finally:
            other.rollback()
            other.close()
        await store.save("s", [user("one")], at=0)  # nothing of the first was kept
        assert [m.text for m in await store.messages("s")] == ["one"]


async def _saves(store: SQLiteStore, count: int) -> None:
    """``count`` saves of ~2 KB each, yielding to the loop now and then, as between steps."""
    for n in range(count):
        await store.save("s", [assistant(f"{n} {'y' * 2000}")], at=n)
        if n % 16 == 0:
            await asyncio.sleep(0.001)
    await store._call(lambda db: None)  # the last checkpoint asked is done


async def test_checkpoints_run_on_the_worker_and_keep_the_log_short(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    count = 3 * CHECKPOINT_EVERY + 1
    async with SQLiteStore(tmp_path / "s.db") as store:
        fast, worker, worker_thread = await _traced(store)
        await _saves(store, count)
        log = (tmp_path / "s.db-wal").stat().st_size
    checkpoints = [(t, sql) for t, sql in worker.seen if "wal_checkpoint" in sql]
    assert len(checkpoints) >= 2
    assert {t for t, _ in checkpoints} == {worker_thread}
    assert not [sql for _, sql in fast.seen if "checkpoint" in sql]
    # the same saves with no checkpoint asked: the log holds every page they wrote
    monkeypatch.setattr("steerable.stores._sqlite_connections.CHECKPOINT_EVERY", 10**9)
    async with SQLiteStore(tmp_path / "unchecked.db") as store:
        await _saves(store, count)
        unchecked = (tmp_path / "unchecked.db-wal").stat().st_size
    assert log < unchecked / 2, (log, unchecked)


async def test_a_save_with_no_steer_waiting_looks_before_it_takes(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with SQLiteStore(path) as store:
        fast, _, _ = await _traced(store)
        await store.save("s", [user("one")], at=0, take=16)
        await store.steer("s", Steer("a steer", "w1"))
        taken = await store.save("s", [assistant("two")], at=1, take=16)
    assert [m.id for m in taken] == ["w1"]
    updates = [sql for _, sql in fast.seen if sql.startswith("UPDATE steerable_steers")]
    assert len(updates) == 1  # the second save's, which found one waiting
    with sqlite3.connect(path) as db:
        plan = db.execute(f"EXPLAIN QUERY PLAN {APPEND_LOOK}", ("s",)).fetchall()
    assert [row[3] for row in plan] == [
        "SCAN CONSTANT ROW",
        "SCALAR SUBQUERY 1",
        "SEARCH steerable_messages USING COVERING INDEX steerable_messages_position (session=?)",
        "SCALAR SUBQUERY 2",
        "SEARCH steerable_steers USING COVERING INDEX steerable_steers_waiting"
        " (session=? AND taken=?)",
    ]


class _Rows:
    """A stand-in for a large result (a whole transcript's rows), weakly referable."""


async def test_a_worker_call_s_result_dies_with_the_caller_s_last_reference(
    tmp_path: Path,
) -> None:
    # The event loop keeps the executor's future until this task next yields: a result
    # carried by it would outlive the caller and be freed at the caller's next await.
    async with SQLiteStore(tmp_path / "s.db") as store:
        result = await store._call(lambda db: _Rows())
        dead = weakref.ref(result)
        del result
        assert dead() is None  # freed here, before this task yields again
