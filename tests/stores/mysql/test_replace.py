"""What the MySQL ``replace`` does beyond the contract's cases, under the store's real locks:
a swap that waited for a save reads the saved tail and is refused; a swap and a save queued
on one session's lock let exactly one win; a claim that waited behind a swap reads the new
transcript; a swap runs while a turn runs and leaves the service's rows alone; positions
and stored times; no service row left for a session the service never saw."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from decimal import Decimal
from typing import Any

import pytest

from steerable import codec
from steerable.errors import SessionBusy, TranscriptConflict
from steerable.messages import assistant, new_id, user
from steerable.service_store import Input
from steerable.store import Steer
from steerable.stores.mysql import MySQLStore, migrate
from tests.stores.mysql import server
from tests.stores.transcripts import five


def _sid() -> str:
    return f"my-replace-{new_id()}"


@asynccontextmanager
async def _session_held(pool: Any, sid: str) -> AsyncIterator[Any]:
    """A transaction of the test holding the session's core row, as a save holds it while it
    appends; rolled back at the end unless the block committed it."""
    holder = await pool.acquire()
    try:
        async with holder.cursor() as cur:
            await cur.execute("START TRANSACTION")
            await cur.execute(
                "SELECT session FROM steerable_sessions WHERE session = %s FOR UPDATE", (sid,)
            )
            yield cur
            await cur.execute("ROLLBACK")
    finally:
        await pool.release(holder)


async def test_a_replace_that_waited_for_a_save_reads_its_tail_and_is_refused() -> None:
    # The test appends a sixth message as a save does, under the session's core row; the
    # swap, shown the five, waits for that row. After the commit it must see six and refuse:
    # a swap that compared before the lock (or in a snapshot of before) would delete the
    # sixth message with the tail.
    sid = _sid()
    async with server.pool_on() as pool:
        store = MySQLStore(pool)
        messages = await five(store, sid)
        sixth = assistant("six")
        async with _session_held(pool, sid) as cur:
            await cur.execute(
                "INSERT INTO steerable_messages (session, position, id, body)"
                " VALUES (%s, 5, %s, %s)",
                (sid, sixth.id, codec.encode(sixth)),
            )
            old = [m.id for m in messages[2:]]
            swapping = asyncio.create_task(store.replace(sid, at=2, old=old, messages=[]))
            await server.until_lock_waits(pool, 1)
            await cur.execute("COMMIT")
        with pytest.raises(TranscriptConflict) as refused:
            await swapping
        assert (refused.value.expected, refused.value.stored) == (5, 6)
        assert await store.messages(sid) == [*messages, sixth]


async def test_a_replace_and_a_save_queued_on_the_sessions_lock_let_one_win() -> None:
    # Both wait for the core row the test holds (the swap holding the service row too), so
    # they run one after the other, in the order the server grants the row: whichever goes
    # second finds the tail changed. Either way exactly one wins, and a swap cut into two
    # transactions (compare, then write) would let the save in between and both would win.
    async with server.pool_on() as pool_a, server.pool_on() as pool_b:
        a, b = MySQLStore(pool_a), MySQLStore(pool_b)
        await b.check_schema()
        for _ in range(6):
            sid = _sid()
            messages = await five(a, sid)
            mine, six = user("mine"), assistant("six")
            async with _session_held(pool_a, sid):
                old = [m.id for m in messages[2:]]
                swapping = asyncio.create_task(a.replace(sid, at=2, old=old, messages=[mine]))
                await server.until_lock_waits(pool_a, 1)
                saving = asyncio.create_task(b.save(sid, [six], at=5))
                await server.until_lock_waits(pool_a, 2)
            outcomes = await asyncio.gather(swapping, saving, return_exceptions=True)
            won = [o for o in outcomes if not isinstance(o, TranscriptConflict)]
            assert len(won) == 1, outcomes
            assert await a.messages(sid) in ([*messages[:2], mine], [*messages, six])


async def test_a_claim_that_waited_behind_a_replace_reads_the_new_transcript() -> None:
    # As for a cut (test_rewrite): the swap holds the service row and waits for the core
    # row the test holds; a claim finds the session with a plain read and waits for the
    # service row. It must then read the transcript the swap left. Its own database, so the
    # session is the only one a claim can find.
    async with server.scratch_database() as pool:
        await migrate(pool)
        store, sid = MySQLStore(pool), _sid()
        messages = await five(store, sid)
        await store.enqueue(sid, Input("send", "go", "t"))
        new = [user("three again", id=messages[2].id)]
        async with _session_held(pool, sid):
            old = [m.id for m in messages[2:]]
            swapping = asyncio.create_task(store.replace(sid, at=2, old=old, messages=new))
            await server.until_lock_waits(pool, 1)
            claiming = asyncio.create_task(store.claim("a", seconds=60, cap=16))
            await server.until_lock_waits(pool, 2)
        await swapping
        claim = await claiming
        assert claim is not None and claim.turn == "t"
        assert claim.messages == [*messages[:2], *new] and claim.start == 3


async def _service_rows(sid: str) -> list[Any]:
    """Every row the session has in the steer box and the service's tables."""
    found = []
    for table, order in (
        ("steers", "seq"),
        ("inputs", "seq"),
        ("turns", "ord"),
        ("events", "id"),
        ("service", "session"),
    ):
        sql = f"SELECT * FROM steerable_{table} WHERE session = %s ORDER BY {order}"
        found.append(await server.query(sql, (sid,)))
    return found


async def test_a_replace_runs_while_a_turn_runs_and_leaves_the_other_rows(
    store: MySQLStore,
) -> None:
    sid = _sid()
    await store.steer(sid, Steer("taken", "s1"))
    await store.save(sid, [user("one")], at=0, take=1)
    await store.steer(sid, Steer("waiting", "s2"))
    await store.enqueue(sid, Input("send", "go", "t"))
    await store.enqueue(sid, Input("send", "later", "u"))
    claim = await store.claim("a", seconds=60, cap=16, session=sid)
    assert claim is not None
    await store.step(claim.lease, [user("go", id="t"), assistant("calling")], at=2, take=0)
    before = await _service_rows(sid)
    stored = await store.messages(sid)
    with pytest.raises(SessionBusy):
        await store.truncate(sid, at=3)
    fixed = assistant("called")
    await store.replace(sid, at=3, old=[stored[3].id], messages=[fixed])
    assert await store.messages(sid) == [*stored[:3], fixed]
    after = await _service_rows(sid)
    assert after[:-1] == before[:-1]
    # the service row alone changes, and only its mark (its last column): the transcript's
    # messages changed, so no claimer may take what it held of them for them
    [(*kept, mark)], [(*now, new_mark)] = before[-1], after[-1]
    assert now == kept and new_mark != mark
    # the holder goes on at the length the swap left; a taken steer's id stays seen
    await store.step(claim.lease, [assistant("done")], at=4, take=0)
    await store.steer(sid, Steer("again", "s1"))
    assert [s.id for s in await store.steers(sid)] == ["s2"]


async def test_positions_run_on_and_a_reused_id_keeps_its_stored_time(store: MySQLStore) -> None:
    sid = _sid()
    messages = await five(store, sid)
    await server.query(
        "UPDATE steerable_messages SET at = 1000.25 + position WHERE session = %s", (sid,)
    )
    added = user("added")
    new = [messages[3], added, user("five again", id=messages[4].id)]
    await store.replace(sid, at=3, old=[m.id for m in messages[3:]], messages=new)
    rows = await server.query(
        "SELECT position, id, at FROM steerable_messages WHERE session = %s ORDER BY position",
        (sid,),
    )
    assert [(int(p), id.decode()) for p, id, _ in rows] == [
        (n, m.id) for n, m in enumerate([*messages[:3], *new])
    ]
    times = [at for _, _, at in rows]
    assert times[:3] == [Decimal("1000.25") + p for p in range(3)]
    assert (times[3], times[5]) == (Decimal("1003.25"), Decimal("1004.25"))
    assert times[4] > Decimal("1700000000")  # stored now, on the server's clock


async def test_a_session_the_service_never_saw_gets_no_service_row(store: MySQLStore) -> None:
    sid = _sid()
    messages = await five(store, sid)
    await store.replace(sid, at=4, old=[messages[4].id], messages=[user("last")])
    with pytest.raises(TranscriptConflict):
        await store.replace(sid, at=4, old=[messages[4].id], messages=[])
    sql = "SELECT count(*) FROM steerable_service WHERE session = %s"
    assert int((await server.query(sql, (sid,)))[0][0]) == 0
