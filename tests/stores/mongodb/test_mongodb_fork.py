"""What the MongoDB store's fork promises beyond the contract's cases.

The contract's transcripts fit in the head, or in chunks of small messages; here the old
session has every kind of document (chunks, a blob, taken and waiting steers, an input): the
fork's own chunks, id lists (a duplicate id refused) and blobs (the old session's delete
leaves the fork whole), the stored times kept, a flush under way read as a reader reads it,
what a dead flusher left at the new session's positions removed, a stale id list not taken
for the transcript, a head cut to nothing taken over, a race with a first save, an enqueue
and a claim waiting for a fork under way, and the commands a fork sends, the same for 1,000
messages as for ten. A SIGKILL at every command of a fork: ``test_mongodb_rewrite.py``.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pymongo import AsyncMongoClient
from pymongo.asynchronous.client_session import AsyncClientSession

from steerable.errors import InvalidMessage, MessageNotFound, SessionExists, TranscriptConflict
from steerable.messages import assistant, new_id, user
from steerable.service_store import Claim, Input
from steerable.store import Steer
from steerable.stores.mongodb import MongoStore
from steerable.stores.mongodb import _layout as layout
from steerable.stores.mongodb._fork import Run
from tests.stores.mongodb._server import URI_VARIABLE, open_store
from tests.stores.mongodb.test_mongodb_queue import Sent
from tests.stores.mongodb.test_mongodb_rewrite import _dead_flush, _documents, _head, _session

pytestmark = pytest.mark.usefixtures("mongo_server")

DATABASE = f"steerable_fork_{uuid.uuid4().hex[:12]}"
store_in_test_db = functools.partial(open_store, DATABASE)


def _sid() -> str:
    return f"fork-{new_id()}"


@pytest.fixture
async def store() -> AsyncIterator[MongoStore]:
    async with store_in_test_db() as opened:
        yield opened


async def _layout_of(store: MongoStore, sid: str) -> tuple[Any, ...]:
    """The new session's chunks and id lists (first position, end), and its head's base."""
    db = store.db
    chunks = await db["steerable_chunks"].find({"_id.s": sid}).to_list(None)
    ids = await db["steerable_sessions"].find({"s": sid, "_id": {"$ne": sid}}).to_list(None)
    head = await _head(store, sid)
    return (
        sorted((c["_id"]["p"], c["e"]) for c in chunks),
        sorted((i["_id"]["p"], i["e"]) for i in ids),
        head["base"],
    )


async def test_a_fork_has_chunks_id_lists_and_blobs_of_its_own(store: MongoStore) -> None:
    """Through every position of a session of chunks [0, 5) and [5, 8), a blob at 5 and a
    tail at 8: the copy reads back whole, its chunks end at the message, its ids refuse a
    duplicate, and the old session's delete leaves it whole."""
    old = _sid()
    before = await _session(store, old)
    forks = {position: _sid() for position in range(1, 10)}
    for position, new in forks.items():
        assert await store.fork(old, new, through=before[position - 1].id) == position
        assert await store.messages(new) == before[:position]
    assert await _layout_of(store, forks[3]) == ([(0, 3)], [(0, 3)], 3)
    assert await _layout_of(store, forks[6]) == ([(0, 5), (5, 6)], [(0, 5), (5, 6)], 6)
    assert await _layout_of(store, forks[9]) == ([(0, 5), (5, 8)], [(0, 5), (5, 8)], 8)
    whole = forks[9]
    counts = await _documents(store, whole)
    assert counts == dict.fromkeys(counts, 0) | {
        "heads": 1,
        "id lists": 2,
        "steerable_chunks": 2,
        "blobs": (await _documents(store, old))["blobs"],
    }
    assert await store.steers(whole) == []
    with pytest.raises(InvalidMessage, match="big-0"):
        await store.save(whole, [user("again", id="big-0")], at=9)  # in the fork's chunk
    await store.steer(whole, Steer("sent again", "k-1"))  # taken in the old: a message here
    assert await store.steers(whole) == []
    assert await store.delete(old) is True
    for position, new in forks.items():
        assert await store.messages(new) == before[:position]


async def test_a_fork_keeps_the_times_the_messages_were_stored(store: MongoStore) -> None:
    old, new = _sid(), _sid()
    await _session(store, old)
    await asyncio.sleep(0.01)  # a fork that stamped its copies would show a later time
    await store.fork(old, new)
    page = await store.transcript(old, after=-1, limit=100)
    copied = await store.transcript(new, after=-1, limit=100)
    assert [(e.message, e.at) for e in copied] == [(e.message, e.at) for e in page]
    assert all(e.at is not None for e in copied) and all(e.turn is None for e in copied)


async def test_a_fork_reads_a_flush_under_way_as_a_reader_does(store: MongoStore) -> None:
    """A dead flusher's marked flush (its chunk and id list written, not committed): the
    copy takes the entries from the old head's tail, and its own flush works."""
    old = _sid()
    kept = await _dead_flush(store, old)
    whole, part = _sid(), _sid()
    assert await store.fork(old, whole) == 3
    assert await store.fork(old, part, through=kept[1].id) == 2
    assert await store.messages(whole) == kept and await store.messages(part) == kept[:2]
    assert await _layout_of(store, whole) == ([], [], 0)
    more = [assistant("y" * 40_000, id="more")]
    await store.save(whole, more, at=3)  # flushed: the ids enter the index, no collision
    assert await _layout_of(store, whole) == ([(0, 4)], [(0, 4)], 4)
    assert await store.messages(whole) == [*kept, *more]


async def test_a_stale_id_list_past_the_base_is_not_the_transcript(store: MongoStore) -> None:
    """An id list a stalled flusher wrote past ``base`` names ids the transcript lacks."""
    old, new = _sid(), _sid()
    first = user("f" * 40_000, id="first")
    await store.save(old, [first], at=0)  # a chunk [0, 1); base 1
    stale = layout.stage(old, [("ghost", '{"v":1}')]).entries
    await store.db["steerable_sessions"].insert_one(layout.id_list(old, 1, stale))
    with pytest.raises(MessageNotFound):
        await store.fork(old, new, through="ghost")
    assert await store.fork(old, new, through="first") == 1


async def test_what_a_dead_flusher_left_in_the_new_session_goes(store: MongoStore) -> None:
    """A chunk and id list at the new session's first position (a flusher stalled across its
    delete) holding an id the fork brings: removed, the copy written there."""
    old, new = _sid(), _sid()
    before = await _session(store, old)
    stale = layout.stage(new, [("big-0", '{"v":1}')]).entries
    await store.db["steerable_chunks"].insert_one(layout.chunk(new, 0, stale))
    await store.db["steerable_sessions"].insert_one(layout.id_list(new, 0, stale))
    assert await store.fork(old, new) == len(before)
    assert await store.messages(new) == before
    assert await _layout_of(store, new) == ([(0, 5), (5, 8)], [(0, 5), (5, 8)], 8)


async def test_a_head_cut_to_nothing_is_free_unless_it_took_a_steer(store: MongoStore) -> None:
    """Cut to nothing, a session is free again (its head replaced); one whose cut removed a
    taken steer still counts that steer (``seen``), as the core's ``steer`` does; a deleted
    one is free, its service document (epoch and event count) kept."""
    old, cut, steered, deleted = _sid(), _sid(), _sid(), _sid()
    before = await _session(store, old)
    await store.save(cut, [user("gone")], at=0)
    await store.truncate(cut, at=0)
    assert await store.fork(old, cut) == len(before)
    assert await store.messages(cut) == before
    await store.steer(steered, Steer("taken", "s"))
    await store.take_steers(steered, at=0, limit=1)
    await store.truncate(steered, at=0)
    with pytest.raises(SessionExists):
        await store.fork(old, steered)
    await _session(store, deleted)
    await store.delete(deleted)
    assert await store.fork(old, deleted) == len(before)
    assert await store.messages(deleted) == before
    assert (await store.status(deleted)).waiting_total == 0
    assert (await _documents(store, deleted))["service"] == 1


async def test_a_fork_and_a_first_save_race_and_one_wins(store: MongoStore) -> None:
    """Into one new id, at once, from two clients: the fork is refused (SessionExists) or the
    save is (TranscriptConflict), and the session holds the winner's messages."""
    old = _sid()
    before = await _session(store, old)
    mine = user("the save's")
    outcomes: set[str] = set()
    async with store_in_test_db() as other:
        for _ in range(10):
            new = _sid()

            async def fork(new: str = new) -> str:
                try:
                    await store.fork(old, new)
                except SessionExists:
                    return "save"
                return "fork"

            async def save(new: str = new) -> str:
                try:
                    await other.save(new, [mine], at=0)
                except TranscriptConflict:
                    return "fork"
                return "save"

            won = set(await asyncio.gather(fork(), save()))
            assert len(won) == 1, f"both or neither won: {won}"
            outcomes |= won
            expected = before if won == {"fork"} else [mine]
            assert await store.messages(new) == expected
    assert outcomes, "no race ran"


async def test_an_enqueue_and_a_claim_wait_for_a_fork_under_way(store: MongoStore) -> None:
    """The fork writes the new session's service document first, so an enqueue in the middle
    of the fork conflicts and runs again after it: the claim's turn starts after the copy."""
    old, new = _sid(), _sid()
    before = await _session(store, old)
    gate, inside = asyncio.Event(), asyncio.Event()

    class Paused(MongoStore):
        async def _runs(self, s: AsyncClientSession, session: str, end: int) -> list[Run]:
            inside.set()
            await gate.wait()
            return await super()._runs(s, session, end)

    fork = asyncio.create_task(Paused(store.db).fork(old, new))
    await inside.wait()

    async def enqueue_and_claim() -> Claim | None:
        await store.enqueue(new, Input("send", "go", "t"))
        return await store.claim("a", seconds=60, cap=16, session=new)

    claim = asyncio.create_task(enqueue_and_claim())
    await asyncio.wait([claim], timeout=1)  # long enough for an enqueue that does not wait
    gate.set()
    assert await fork == len(before)
    claimed = await claim
    assert claimed is not None and claimed.start == len(before) == len(claimed.messages)


async def test_a_fork_sends_as_many_commands_for_1000_messages_as_for_ten(
    store: MongoStore,
) -> None:
    """Every command of a fork into a new id, each once: the lock (and the service document
    made for it, removed at the end), the old head, its chunks, the new head, the chunks'
    copies and their id lists, each one insert."""
    short, long = _sid(), _sid()
    await store.save(short, [user(f"m{i}" * 2000) for i in range(10)], at=0)  # a chunk
    for start in range(0, 1000, 100):
        batch = [user(f"m{start + i}" * 50) for i in range(100)]
        await store.save(long, batch, at=start)
    chunks = (await _documents(store, long))["steerable_chunks"]
    assert chunks >= 3, "the long session is not in several chunks"
    sent = Sent()
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        os.environ[URI_VARIABLE], event_listeners=[sent]
    )
    try:
        recorded = MongoStore(client[DATABASE])
        await recorded.check_schema()
        sequences = []
        for old in (short, long):
            with sent.recording() as commands:
                started = time.perf_counter()
                await recorded.fork(old, _sid())
                took = time.perf_counter() - started
            sequences.append(commands)
        print(f"fork of 1,000 messages in {chunks} chunks: {took * 1000:.1f} ms")
    finally:
        await client.close()
    lock = "findAndModify:steerable_service"
    expected = [
        lock,  # no service document yet: none found, the transaction aborted
        "abortTransaction",
        "update:steerable_service",  # made, outside
        lock,
        "find:steerable_sessions",  # the old head
        "find:steerable_sessions",  # the new one
        "find:steerable_chunks",
        "delete:steerable_chunks",  # a dead flusher's, if any
        "delete:steerable_sessions",
        "insert:steerable_sessions",  # the head
        "insert:steerable_chunks",
        "insert:steerable_sessions",  # the id lists
        "delete:steerable_service",  # the service document made for the lock
        "commitTransaction",
    ]
    assert sequences == [expected, expected]
