"""What the Postgres cut and delete do beyond the contract's rewrite cases, each race made
deterministic by a lock a connection of the test holds: a save that waited on a delete's
lock of the last message appends nothing after it; a cut waits for a save that holds that
message; a claim that waited behind a cut reads the cut transcript; a session the service
never saw gets no row from either verb, and a deleted one is not listed."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from steerable.errors import TranscriptConflict
from steerable.messages import assistant, new_id
from steerable.service_store import Input
from steerable.store import Steer
from steerable.stores.postgres import PostgresStore
from tests.stores.postgres.support import until_lock_waits
from tests.stores.transcripts import five


def _sid() -> str:
    return f"pg-rewrite-{new_id()}"


async def test_a_save_that_waited_on_a_delete_appends_nothing_after_it(pool: Any) -> None:
    # The delete holds the last message and waits on a steer the test holds; the save took
    # its snapshot before the delete committed, so it sees five messages and would append
    # a sixth, alone, into the forgotten session. Its lock of the fifth tells it otherwise.
    store, sid = PostgresStore(pool), _sid()
    await five(store, sid)
    await store.steer(sid, Steer("waiting", "s1"))
    async with pool.acquire() as holder:
        transaction = holder.transaction()
        await transaction.start()
        await holder.execute("SELECT FROM steerable_steers WHERE session = $1 FOR UPDATE", sid)
        deleting = asyncio.create_task(store.delete(sid))
        await until_lock_waits(pool, 1)
        saving = asyncio.create_task(store.save(sid, [assistant("six")], at=5))
        await until_lock_waits(pool, 2)
        await transaction.rollback()
    assert await deleting is True
    with pytest.raises(TranscriptConflict) as raised:
        await saving
    assert (raised.value.expected, raised.value.stored) == (5, 0)
    assert await store.messages(sid) == []
    assert await store.steers(sid) == []


async def test_a_cut_waits_for_a_save_that_holds_the_last_message(pool: Any) -> None:
    # The save holds the fifth message (the one it appends after) and waits on the steer it
    # takes; the cut, told five, must wait for it and then find seven, not cut the fifth
    # from under the save and leave a gap before the sixth.
    store, sid = PostgresStore(pool), _sid()
    messages = await five(store, sid)
    await store.steer(sid, Steer("taken", "s1"))
    async with pool.acquire() as holder:
        transaction = holder.transaction()
        await transaction.start()
        await holder.execute("SELECT FROM steerable_steers WHERE session = $1 FOR UPDATE", sid)
        saving = asyncio.create_task(store.save(sid, [assistant("six")], at=5, take=1))
        await until_lock_waits(pool, 1)
        cutting = asyncio.create_task(store.truncate(sid, at=4, length=5))
        await until_lock_waits(pool, 2)
        await transaction.rollback()
    assert [m.id for m in await saving] == ["s1"]
    with pytest.raises(TranscriptConflict) as raised:
        await cutting
    assert (raised.value.expected, raised.value.stored) == (5, 7)
    stored = await store.messages(sid)
    assert stored[:5] == messages and [m.text for m in stored[5:]] == ["six", "taken"]


async def test_a_claim_that_waited_behind_a_cut_reads_the_cut_transcript(pool: Any) -> None:
    # The cut holds the session's row and waits for the last message, which the test holds
    # as a save would; the claim's statement began before the cut committed, so its
    # snapshot still has five messages: the row's version tells it to read again.
    store, sid = PostgresStore(pool), _sid()
    messages = await five(store, sid)
    await store.enqueue(sid, Input("send", "go", "t"))
    async with pool.acquire() as holder:
        transaction = holder.transaction()
        await transaction.start()
        await holder.execute(
            "SELECT FROM steerable_messages WHERE session = $1 AND position = 4 FOR KEY SHARE",
            sid,
        )
        cutting = asyncio.create_task(store.truncate(sid, at=2))
        await until_lock_waits(pool, 1)
        claiming = asyncio.create_task(store.claim("a", seconds=60, cap=16, session=sid))
        await until_lock_waits(pool, 2)
        await transaction.rollback()
    assert await cutting == messages[2:]
    claim = await claiming
    assert claim is not None and claim.turn == "t"
    assert claim.messages == messages[:2] and claim.start == 2


async def test_a_session_the_service_never_saw_gets_no_row(pool: Any) -> None:
    store, sid = PostgresStore(pool), _sid()
    await five(store, sid)
    await store.truncate(sid, at=3)
    assert await store.delete(sid) is True
    assert await store.delete(sid) is False
    rows = await pool.fetchval("SELECT count(*) FROM steerable_sessions WHERE session = $1", sid)
    assert rows == 0


async def test_a_deleted_session_is_not_listed(pool: Any) -> None:
    store, prefix = PostgresStore(pool), f"pg-listed-{new_id()}/"
    for name in ("a", "b"):
        await store.enqueue(prefix + name, Input("send", "go", "t"))
    assert await store.delete(prefix + "a") is True
    assert [s.session for s in await store.sessions(prefix=prefix, after=None, limit=10)] == [
        prefix + "b"
    ]
    await store.enqueue(prefix + "a", Input("send", "again", "t"))
    listed = await store.sessions(prefix=prefix, after=None, limit=10)
    assert [(s.session, s.state, s.queued) for s in listed] == [
        (prefix + "a", "queued", 1),
        (prefix + "b", "queued", 1),
    ]


async def test_a_cut_keeps_the_metadata_of_a_session_the_service_never_ran(pool: Any) -> None:
    # The row that holds only metadata is not one the cut made: it stays; a delete forgets
    # the metadata and then leaves no row.
    store, sid = PostgresStore(pool), _sid()
    await five(store, sid)
    await store.set_metadata(sid, {"title": "kept"})
    await store.truncate(sid, at=3)
    assert (await store.status(sid)).metadata == {"title": "kept"}
    assert await store.delete(sid) is True
    assert (await store.status(sid)).metadata == {}
    rows = await pool.fetchval("SELECT count(*) FROM steerable_sessions WHERE session = $1", sid)
    assert rows == 0
    await store.set_metadata(sid, {"only": "metadata"})
    assert await store.delete(sid) is True  # it had metadata (as the memory reference says)
    assert await store.delete(sid) is False
