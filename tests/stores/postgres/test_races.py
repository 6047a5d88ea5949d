"""Races a statement can lose only while it waits on a lock: forced by holding the lock.

The race of two pinned saves for one position is the suite's (``test_contract.py``, hook
``hold_steer``); here, what is Postgres's own: a take at the end that lost its steer, and a
take that waits for a locked older steer rather than skipping it.

A take locks the oldest waiting steers. While another connection holds one of those rows
(``SELECT ... FOR UPDATE`` in an open transaction), every take of the session waits; when
it lets go, the waiters run one after the other on what the first one committed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from steerable.messages import new_id, user
from steerable.store import Steer
from steerable.stores.postgres import PostgresStore
from tests.stores.postgres.support import create_pool


def _sid() -> str:
    return f"pg-race-{new_id()}"


@asynccontextmanager
async def _steer_locked(pool: Any, sid: str, steer_id: str) -> AsyncIterator[None]:
    """Hold the row lock of one waiting steer for the block, taking nothing."""
    async with pool.acquire() as holder, holder.transaction():
        locked = await holder.fetch(
            "SELECT seq FROM steerable_steers WHERE session = $1 AND id = $2 FOR UPDATE",
            sid,
            steer_id,
        )
        assert len(locked) == 1
        yield
        # the transaction ends here without a change: the waiters go on


async def _until_waiting(pool: Any, count: int, *tasks: asyncio.Task[Any]) -> None:
    """Until ``count`` backends of this database wait on a lock, or a task is done."""
    query = (
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    for _ in range(1000):
        if any(t.done() for t in tasks) or await pool.fetchval(query) >= count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{count} backends never waited on a lock")


async def test_a_take_at_the_end_that_lost_its_steer_takes_the_next(
    pool: Any, database: str
) -> None:
    # The same race at the end (`at=None`): the loser is not a conflict, it takes at the new
    # end whatever is still waiting, and every steer is recorded once, in order.
    sid = _sid()
    store = PostgresStore(pool)
    await store.save(sid, [user("go")], at=0)
    for i in range(3):
        await store.steer(sid, Steer(f"steer {i}", f"s{i}"))
    replicas = await create_pool(database, min_size=2, max_size=2)
    try:
        mine = PostgresStore(replicas)
        async with _steer_locked(pool, sid, "s0"):
            takes = [asyncio.create_task(mine.take_steers(sid, at=None, limit=1)) for _ in range(2)]
            await _until_waiting(pool, 2)
        results = await asyncio.gather(*takes)
    finally:
        await replicas.close()
    assert sorted(m.id for r in results for m in r) == ["s0", "s1"]
    assert [m.id for m in await store.messages(sid)][1:] == ["s0", "s1"]
    assert [s.id for s in await store.steers(sid)] == ["s2"]


async def test_a_take_waits_for_a_locked_older_steer_rather_than_skip_it(pool: Any) -> None:
    # Skipping a locked steer (SKIP LOCKED) would record the newer one first, out of order.
    sid = _sid()
    store = PostgresStore(pool)
    await store.save(sid, [user("go")], at=0)
    await store.steer(sid, Steer("older", "old"))
    await store.steer(sid, Steer("newer", "new"))
    async with _steer_locked(pool, sid, "old"):
        take = asyncio.create_task(store.take_steers(sid, at=1, limit=1))
        await _until_waiting(pool, 1, take)
        assert not take.done(), f"took {take.result()} past the locked older steer"
    assert [m.id for m in await take] == ["old"]
    assert [m.id for m in await store.take_steers(sid, at=2, limit=1)] == ["new"]
    assert [m.id for m in await store.messages(sid)][1:] == ["old", "new"]
