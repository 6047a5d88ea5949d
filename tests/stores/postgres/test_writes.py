"""Two writers, and saves cut off half way: what is stored is all of a save or none of it."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest

from steerable.errors import StoreUnavailable, TranscriptConflict, UsageError
from steerable.messages import assistant, new_id, user
from steerable.store import Steer
from steerable.stores.postgres import PostgresStore, migrate
from tests.stores.postgres.support import create_pool, server_address
from tests.stores.postgres.wire import Wire


def _sid() -> str:
    return f"pg-{new_id()}"


async def test_a_redo_conflicts_even_when_the_id_key_is_checked_first(
    empty_schema: Any, database: str
) -> None:
    # Postgres checks unique keys in index creation order. After a REINDEX CONCURRENTLY of
    # the position key the id key comes first, and a replica redoing a step that another
    # one just committed trips over the id of its first message: that is still a conflict.
    await migrate(empty_schema)
    await empty_schema.execute("REINDEX INDEX CONCURRENTLY steerable_messages_position")
    schema = await empty_schema.fetchval("SELECT current_schema()")
    redo = await create_pool(
        database, min_size=1, max_size=1, server_settings={"search_path": schema}
    )
    sid, prompt, step = _sid(), user("prompt"), [assistant("answer"), user("more")]
    await PostgresStore(empty_schema).save(sid, [prompt], at=0)
    other = await empty_schema.acquire()
    try:
        async with redo.acquire() as connection:
            pid = connection.get_server_pid()
        async with other.transaction():  # the other replica's save of the same step
            await PostgresStore(other).save(sid, step, at=1)
            late = asyncio.create_task(PostgresStore(redo).save(sid, step, at=1))
            await _wait_for_lock(empty_schema, pid)
        with pytest.raises(TranscriptConflict) as caught:
            await late
        assert caught.value.stored == 3
    finally:
        await empty_schema.release(other)
        await redo.close()
    assert await PostgresStore(empty_schema).messages(sid) == [prompt, *step]


async def _wait_for_lock(pool: Any, pid: int) -> None:
    """Until backend ``pid`` waits on a lock (a bounded poll, not a timing assertion)."""
    query = "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $1"
    for _ in range(1000):
        if await pool.fetchval(query, pid):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"backend {pid} never waited on a lock")


async def test_a_save_killed_mid_statement_stores_none_of_it(pool: Any, database: str) -> None:
    # The save takes the steers and writes 300 of its 600 rows, then waits on a row another
    # transaction holds; there its backend is terminated. Nothing of it may remain.
    sid = _sid()
    base = [user("prompt")]
    await PostgresStore(pool).save(sid, base, at=0)
    for i in range(3):
        await PostgresStore(pool).steer(sid, Steer(f"steer {i}", f"s{i}"))
    victim = await create_pool(database, min_size=1, max_size=1)
    blocker = await pool.acquire()
    hold = blocker.transaction()
    try:
        async with victim.acquire() as connection:
            pid = connection.get_server_pid()
        await hold.start()
        await blocker.execute(
            "INSERT INTO steerable_messages VALUES ($1, 301, 'blocker', '{}')", sid
        )
        step = [user(f"tool result {i} " + "x" * 1000) for i in range(600)]
        save = asyncio.create_task(PostgresStore(victim).save(sid, step, at=1, take=16))
        await _wait_for_lock(pool, pid)
        with pytest.raises(asyncpg.LockNotAvailableError):  # it holds the steers it took
            await pool.execute(
                "SELECT FROM steerable_steers WHERE session = $1 FOR UPDATE NOWAIT", sid
            )
        assert await pool.fetchval("SELECT pg_terminate_backend($1)", pid)
        with pytest.raises(StoreUnavailable):
            await save
    finally:
        await hold.rollback()
        await pool.release(blocker)
        await victim.close()
    store = PostgresStore(pool)
    assert await store.messages(sid) == base
    assert [s.id for s in await store.steers(sid)] == ["s0", "s1", "s2"]
    taken = await store.save(sid, step, at=1, take=16)
    assert [m.id for m in taken] == ["s0", "s1", "s2"]
    assert [m.id for m in await store.messages(sid)] == [m.id for m in base + step + taken]


async def test_a_save_cut_off_after_it_committed_is_stored_whole(database: str) -> None:
    # The line dies as the server answers: the client gets StoreUnavailable, yet the save
    # and the steers it took are stored, each steer once; a retry sees a conflict.
    wire = Wire(*server_address())
    await wire.restore()
    pool = await create_pool(database, host="127.0.0.1", port=wire.port, min_size=1, max_size=1)
    try:
        store = PostgresStore(pool)
        sid, prompt, steer = _sid(), user("prompt"), Steer("use celsius", "s1")
        await store.save(sid, [prompt], at=0)
        await store.steer(sid, steer)
        step = [assistant("calling"), user("result")]
        # the first statement finds the steer and writes nothing; the line dies as the
        # server answers the second, which saved and took it
        wire.cut_on_reply, wire.replies_before_cut = True, 1
        with pytest.raises(StoreUnavailable):
            await store.save(sid, step, at=1, take=16)
        assert wire.cuts == 1
        stored = await store.messages(sid)
        with pytest.raises(TranscriptConflict):
            await store.save(sid, step, at=1, take=16)
        assert await store.steers(sid) == []
        assert await store.take_steers(sid, at=None, limit=16) == []
    finally:
        await pool.close()
        await wire.cut()
    assert stored == [prompt, *step, steer.message()]


async def test_a_session_id_holding_nul_given_directly_is_a_usage_error(
    store: PostgresStore,
) -> None:
    # Message and steer ids holding NUL are refused where they are made, and session ids at
    # the front door; one given to the store directly is still a UsageError (a Postgres text
    # value cannot hold NUL: a limit of the column, not an outage), and nothing is written.
    sid = _sid()
    await store.save(sid, [user("kept")], at=0)
    with pytest.raises(UsageError, match="cannot hold NUL"):
        await store.messages("s\x00")
    with pytest.raises(UsageError, match="cannot hold NUL"):
        await store.steer("s\x00", Steer("x"))
    assert [m.text for m in await store.messages(sid)] == ["kept"]
