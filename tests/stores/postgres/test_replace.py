"""What the Postgres ``replace`` does beyond the contract's cases, each race made
deterministic by a lock a connection of the test holds, as in ``test_rewrite.py``: a
replace waits for a save that holds the last message and then finds the tail grown; a save
that waited on a replace appends after the new tail or not at all; a claim that waited
behind one reads the new tail; one that lost an empty transcript to a save is a conflict.
Beside a running turn it is not refused, and the turn's next step, told the old length,
is a conflict."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from steerable.errors import TranscriptConflict
from steerable.messages import assistant, new_id, user
from steerable.service_store import Input
from steerable.store import Steer
from steerable.stores.postgres import PostgresStore
from tests.stores.postgres.support import create_pool, until_lock_waits
from tests.stores.transcripts import five


def _sid() -> str:
    return f"pg-replace-{new_id()}"


async def test_a_replace_waits_for_a_save_that_holds_the_last_message(pool: Any) -> None:
    # The save holds the fifth message (the one it appends after) and waits on the steer it
    # takes; the replace, shown the five, must wait for it and then find seven: swapping
    # the three it read would leave the save's two after a gap.
    store, sid = PostgresStore(pool), _sid()
    messages = await five(store, sid)
    await store.steer(sid, Steer("taken", "s1"))
    async with pool.acquire() as holder:
        transaction = holder.transaction()
        await transaction.start()
        await holder.execute("SELECT FROM steerable_steers WHERE session = $1 FOR UPDATE", sid)
        saving = asyncio.create_task(store.save(sid, [assistant("six")], at=5, take=1))
        await until_lock_waits(pool, 1)
        old = [m.id for m in messages[2:]]
        replacing = asyncio.create_task(store.replace(sid, at=2, old=old, messages=[user("x")]))
        await until_lock_waits(pool, 2)
        await transaction.rollback()
    assert [m.id for m in await saving] == ["s1"]
    with pytest.raises(TranscriptConflict) as raised:
        await replacing
    assert (raised.value.expected, raised.value.stored) == (5, 7)
    stored = await store.messages(sid)
    assert stored[:5] == messages and [m.text for m in stored[5:]] == ["six", "taken"]


async def test_a_save_that_waited_on_a_replace_appends_after_the_new_tail(database: str) -> None:
    # five connections at once: the holder, three waiting, and the poll of the waits
    pool = await create_pool(database, max_size=5)
    try:
        await _save_waits_on_replace(pool)
    finally:
        await pool.close()


async def _save_waits_on_replace(pool: Any) -> None:
    # The replace holds the last message and waits to delete the third, which the test
    # holds as a save of the fourth would. Two saves wait on the last message: one pinned
    # at the old length (a conflict once the tail is two messages shorter), one at the end.
    # Which of the two runs first once the replace commits is the server's choice: the
    # pinned one reads 3 before the take appends, or 4 after it. Never 5: a new tail as
    # long as the old one less one (what this test had) let the take's append make the
    # pinned length right again, and the pinned save then appended, one run in five.
    store, sid = PostgresStore(pool), _sid()
    messages = await five(store, sid)
    await store.steer(sid, Steer("late", "s1"))
    new = [user("three, again")]
    async with pool.acquire() as holder:
        transaction = holder.transaction()
        await transaction.start()
        await holder.execute(
            "SELECT FROM steerable_messages WHERE session = $1 AND position = 2 FOR KEY SHARE",
            sid,
        )
        old = [m.id for m in messages[2:]]
        replacing = asyncio.create_task(store.replace(sid, at=2, old=old, messages=new))
        await until_lock_waits(pool, 1)
        pinned = asyncio.create_task(store.save(sid, [assistant("six")], at=5))
        taking = asyncio.create_task(store.take_steers(sid, at=None, limit=1))
        await until_lock_waits(pool, 3)
        await transaction.rollback()
    await replacing
    with pytest.raises(TranscriptConflict) as raised:
        await pinned
    assert raised.value.expected == 5 and raised.value.stored in (3, 4)
    assert [m.id for m in await taking] == ["s1"]
    stored = await store.messages(sid)
    assert stored[:3] == [*messages[:2], *new] and [m.id for m in stored[3:]] == ["s1"]
    positions = await pool.fetch(
        "SELECT position FROM steerable_messages WHERE session = $1 ORDER BY position", sid
    )
    assert [p[0] for p in positions] == [0, 1, 2, 3]


async def test_a_claim_that_waited_behind_a_replace_reads_the_new_tail(pool: Any) -> None:
    # The replace holds the session's row and waits for the last message, which the test
    # holds as a save would; the claim's snapshot still has the old tail: the row's version
    # tells it to read again.
    store, sid = PostgresStore(pool), _sid()
    messages = await five(store, sid)
    await store.enqueue(sid, Input("send", "go", "t"))
    new = [assistant("four, repaired")]
    async with pool.acquire() as holder:
        transaction = holder.transaction()
        await transaction.start()
        await holder.execute(
            "SELECT FROM steerable_messages WHERE session = $1 AND position = 4 FOR KEY SHARE",
            sid,
        )
        old = [m.id for m in messages[3:]]
        replacing = asyncio.create_task(store.replace(sid, at=3, old=old, messages=new))
        await until_lock_waits(pool, 1)
        claiming = asyncio.create_task(store.claim("a", seconds=60, cap=16, session=sid))
        await until_lock_waits(pool, 2)
        await transaction.rollback()
    await replacing
    claim = await claiming
    assert claim is not None and claim.turn == "t"
    assert claim.messages == [*messages[:3], *new] and claim.start == 4


async def test_a_replace_that_lost_an_empty_transcript_to_a_save_is_a_conflict(
    pool: Any,
) -> None:
    # An empty transcript has no message to hold: the save's row, not yet committed, is
    # what the replace's insert waits on, and then collides with.
    store, sid = PostgresStore(pool), _sid()
    await store.messages(sid)  # checked before the race
    async with pool.acquire() as holder:
        transaction = holder.transaction()
        await transaction.start()
        await PostgresStore(holder).save(sid, [user("first")], at=0)
        replacing = asyncio.create_task(store.replace(sid, at=0, old=[], messages=[user("x")]))
        await until_lock_waits(pool, 1)
        await transaction.commit()
    with pytest.raises(TranscriptConflict) as raised:
        await replacing
    assert (raised.value.expected, raised.value.stored) == (0, 1)
    assert [m.text for m in await store.messages(sid)] == ["first"]


async def test_a_replace_beside_a_running_turn_is_not_refused_and_fences_its_step(
    pool: Any,
) -> None:
    store, sid = PostgresStore(pool), _sid()
    messages = await five(store, sid)
    await store.enqueue(sid, Input("send", "go", "t"))
    claim = await store.claim("a", seconds=60, cap=16, session=sid)
    assert claim is not None and claim.start == 5
    events = await store.events(sid, after=0, limit=100)
    await store.replace(sid, at=4, old=[messages[4].id], messages=[])
    with pytest.raises(TranscriptConflict):
        await store.step(claim.lease, [claim.prompt.message(steered=False)], at=5, take=0)
    await store.step(claim.lease, [claim.prompt.message(steered=False)], at=4, take=0)
    assert [m.text for m in await store.messages(sid)] == ["one", "two", "three", "four", "go"]
    assert (await store.events(sid, after=0, limit=100))[: len(events)] == events
    assert (await store.status(sid)).turn is not None
