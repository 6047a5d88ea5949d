"""What the MongoDB store's migrations do beyond every server store's (those:
tests/stores/test_server_migrations.py): the index, reads before the migrations, the
layout of ``create_indexes``, a database of layout 1 converted by step 2, and a service's
queue of version 3 carried on by step 4, and the marks step 6 gives the service's documents
of before."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pymongo.asynchronous.database import AsyncDatabase

from steerable import codec
from steerable.errors import InvalidMessage, QueueFull, StoreUnavailable
from steerable.messages import Message, user
from steerable.service_store import Input, Known, Outcome
from steerable.store import Steer
from steerable.stores.mongodb import COLLECTIONS, MIGRATIONS, MongoStore, migrate
from steerable.stores.mongodb import _layout as layout
from tests.stores.mongodb._server import scratch_database

pytestmark = pytest.mark.usefixtures("mongo_server")

_ALL = [m.version for m in MIGRATIONS]
_AFTER = len(MIGRATIONS) - 1  # the steps after the first, as the refusals count them


@pytest.fixture
async def db() -> AsyncIterator[AsyncDatabase[Any]]:
    """An empty database of its own, dropped after the test."""
    async with scratch_database() as database:
        yield database


async def test_the_collections_and_the_unique_index_are_made(db: AsyncDatabase[Any]) -> None:
    await migrate(db)
    assert set(COLLECTIONS) <= set(await db.list_collection_names())
    ids_index = (await db["steerable_sessions"].index_information())["steerable_session_ids"]
    assert ids_index["key"] == [("s", 1), ("k", 1)] and ids_index["unique"]


async def test_without_the_migrations_nothing_is_written(db: AsyncDatabase[Any]) -> None:
    store = MongoStore(db)
    assert await store.messages("s") == [] and await store.steers("s") == []
    step = rf"step 1 \({MIGRATIONS[0].summary}\) and {_AFTER} after it"
    with pytest.raises(StoreUnavailable, match=rf"no steerable schema.*{step}"):
        await store.check_schema()
    for call in (
        lambda: store.save("s", [user("x")], at=0),
        lambda: store.steer("s", Steer("x")),
        lambda: store.take_steers("s", at=None, limit=1),
    ):
        with pytest.raises(StoreUnavailable, match=rf"{step}.*mongodb\.migrate\(db\)"):
            await call()
    assert await db["steerable_sessions"].count_documents({}) == 0
    await migrate(db)
    await store.save("s", [user("x")], at=0)  # the same store object, now it may
    assert [m.text for m in await store.messages("s")] == ["x"]


async def test_a_database_of_create_indexes_is_adopted(db: AsyncDatabase[Any]) -> None:
    # The releases before the migrations made layout 2 with create_indexes, recording nothing.
    for name in COLLECTIONS:
        await db.create_collection(name)
    await db["steerable_sessions"].create_index([("s", 1), ("k", 1)], unique=True)
    assert await migrate(db) == _ALL
    await MongoStore(db).check_schema()


# -- layout 1 ----------------------------------------------------------------------------


def _entry(message: Message) -> dict[str, Any]:
    body = codec.encode(message)
    return {"i": message.id, "b": body, "z": len(body) + len(message.id) + 24}


async def _layout_1(db: AsyncDatabase[Any], sid: str, messages: list[Message]) -> None:
    """A session as layout 1 kept it: two chunks, a tail, every id in the head, a steer
    waiting, and the chunk of a flush that died before its commit."""
    entries = [_entry(m) for m in messages]
    chunks = db["steerable_chunks"]
    await chunks.insert_one({"_id": {"s": sid, "p": 0}, "e": 2, "m": entries[:2]})
    await chunks.insert_one({"_id": {"s": sid, "p": 2}, "e": 4, "m": entries[2:4]})
    await chunks.insert_one({"_id": {"s": sid, "p": 4}, "e": 5, "m": entries[4:5]})  # dead
    await db["steerable_sessions"].insert_one(
        {
            "_id": sid,
            "n": len(entries),
            "base": 4,
            "tail": entries[4:],
            "tb": sum(e["z"] for e in entries[4:]),
            "ids": [m.id for m in messages],
            "box": [_entry(Steer("waiting", "w-1").message())],
            "took": [],
        }
    )


async def test_step_2_converts_a_database_of_layout_1(db: AsyncDatabase[Any]) -> None:
    sessions = {f"old-{i}": [user(f"{i}-{n}", id=f"m-{n}") for n in range(6)] for i in range(3)}
    for sid, messages in sessions.items():
        await _layout_1(db, sid, messages)
    store = MongoStore(db)
    with pytest.raises(StoreUnavailable, match=rf"step 1 .* and {_AFTER} after it"):
        await store.save("old-0", [user("new")], at=6)
    applied = await asyncio.gather(migrate(db), migrate(db))  # two replicas, at once
    assert _ALL in applied
    await store.check_schema()
    for sid, messages in sessions.items():
        assert await store.messages(sid) == messages
        for old in ("m-0", "m-3", "m-5"):  # in a chunk, a chunk, the tail: all still known
            with pytest.raises(InvalidMessage, match=old):
                await store.save(sid, [user("again", id=old)], at=6)
        await store.steer(sid, Steer("sent again", "m-1"))  # an id seen before: ignored
        assert [s.id for s in await store.steers(sid)] == ["w-1"]
        # a save big enough to flush: the whole tail goes to a chunk at 4, where layout 1's
        # dead flush left a shorter one
        big = [user("x" * 40_000, id="big")]
        assert [m.id for m in await store.save(sid, big, at=6, take=16)] == ["w-1"]
        head = await db["steerable_sessions"].find_one({"_id": sid})
        assert head is not None and head["base"] == 8 and "ids" not in head
        assert [m.id for m in await store.messages(sid)] == [m.id for m in messages] + [
            "big",
            "w-1",
        ]
        with pytest.raises(InvalidMessage, match="m-4"):
            await store.save(sid, [user("again", id="m-4")], at=8)


# -- step 4 ------------------------------------------------------------------------------


async def _as_version_3(db: AsyncDatabase[Any]) -> None:
    """Take from a migrated database what step 4 and the writes after it added: the
    version, the indexes, the waiting counts, the turns' seqs, the times, the metadata (the
    head of session ``v`` holds small messages only); and step 5's journal."""
    await db["steerable_schema"].delete_many({"_id": {"$gte": 4}})
    await db.drop_collection("steerable_journal")  # step 5's
    for collection, name, _, _ in layout.QUEUE_INDEXES:
        await db[collection].drop_index(name)
    await db["steerable_service"].update_many({}, {"$unset": {"wt": ""}})
    await db["steerable_turns"].update_many({}, {"$unset": {"n": "", "sa": "", "ea": "", "us": ""}})
    await db["steerable_inputs"].update_many({}, {"$unset": {"at": "", "md": ""}})
    unstamped = {
        "$map": {"input": "$tail", "in": {"i": "$$this.i", "b": "$$this.b", "z": "$$this.z"}}
    }
    await db["steerable_sessions"].update_one({"_id": "v"}, [{"$set": {"tail": unstamped}}])


async def test_step_4_keeps_a_database_of_version_3(db: AsyncDatabase[Any]) -> None:
    """A session with an ended turn, a running one with a steer offered and a send queued:
    migrated, its counts and turns are whole, and the queue goes on where it was."""
    await migrate(db)
    store = MongoStore(db)
    await store.enqueue("v", Input("send", "first", "t1"))
    first = await store.claim("a", seconds=60, cap=16, session="v")
    assert first is not None
    await store.step(first.lease, [first.prompt.message(steered=False)], at=0, take=16)
    await store.end_turn(first.lease, Outcome("completed"))
    await store.enqueue("v", Input("send", "second", "t2"))
    claim = await store.claim("a", seconds=60, cap=16, session="v")
    assert claim is not None
    await store.step(claim.lease, [claim.prompt.message(steered=False)], at=1, take=16)
    await store.enqueue("v", Input("steer", "and this", "s"))
    await store.enqueue("v", Input("send", "then", "u"))
    await _as_version_3(db)
    head = await db["steerable_sessions"].find_one({"_id": "v"})
    assert head is not None and all("a" not in entry for entry in head["tail"])

    old = MongoStore(db)
    with pytest.raises(StoreUnavailable, match=r"step 4"):
        await old.enqueue("v", Input("send", "refused"))
    assert await migrate(db) == [4, 5, 6]
    store = MongoStore(db)
    status = await store.status("v")
    assert (status.waiting_total, status.queued) == (2, 1)
    assert [(w.id, w.turn, w.at) for w in status.waiting] == [("s", "t2", 0.0), ("u", None, 0.0)]
    turns = await store.turns("v", after=0, limit=10)
    assert [(t.id, t.seq, t.state, t.started_at) for t in turns] == [
        ("t1", 1, "completed", None),
        ("t2", 2, "running", None),
    ]
    assert [e.at for e in await store.transcript("v", after=-1, limit=10)] == [None, None]
    assert await store.stop("v") == "t2" and await store.stopping("a") == ["v"]
    with pytest.raises(QueueFull):
        await store.enqueue("v", Input("send", "full"), max_waiting=2)
    await store.end_turn(claim.lease, Outcome("stopped"))
    ended = (await store.events("v", after=0, limit=100))[-1]
    assert ended.data == {"state": "stopped", "released": ["s"]}
    follow = await store.claim("a", seconds=60, cap=16, session="v")
    assert follow is not None and follow.turn == "s"
    assert [t.seq for t in await store.turns("v", after=0, limit=10)] == [1, 2, 3]
    assert (await store.status("v")).waiting_total == 1


# -- step 6 ------------------------------------------------------------------------------


async def test_step_6_gives_each_service_document_of_before_its_own_mark(
    db: AsyncDatabase[Any],
) -> None:
    """Sessions of version 5 (one with a turn run, two only enqueued to, one with metadata
    alone): after step 6, run by two migrators at once, each has a mark of its own, which
    its next claim returns and a later migration does not change."""
    await migrate(db)
    store = MongoStore(db)
    await store.enqueue("a", Input("send", "first", "t1"))
    first = await store.claim("r", seconds=60, cap=16, session="a")
    assert first is not None
    await store.step(first.lease, [first.prompt.message(steered=False)], at=0, take=16)
    await store.end_turn(first.lease, Outcome("completed"))
    for sid in ("b", "c"):
        await store.enqueue(sid, Input("send", "go"))
    await store.set_metadata("d", {"k": "v"})
    await db["steerable_schema"].delete_many({"_id": {"$gte": 6}})
    await db["steerable_service"].update_many({}, {"$unset": {"mk": ""}})

    with pytest.raises(StoreUnavailable, match=r"step 6"):
        await MongoStore(db).enqueue("a", Input("send", "refused"))
    applied = await asyncio.gather(migrate(db), migrate(db))
    assert [6] in applied
    docs = await db["steerable_service"].find({}, {"mk": 1}).sort("_id", 1).to_list(None)
    marks = {doc["_id"]: doc["mk"] for doc in docs}
    assert sorted(marks) == ["a", "b", "c", "d"] and len(set(marks.values())) == 4
    assert await migrate(db) == []
    again = await db["steerable_service"].find({}, {"mk": 1}).sort("_id", 1).to_list(None)
    assert {doc["_id"]: doc["mk"] for doc in again} == marks
    store = MongoStore(db)
    await store.enqueue("a", Input("send", "second"))
    claim = await store.claim("r", seconds=60, cap=16, session="a", known={"a": Known(1, "old")})
    assert claim is not None and claim.mark == marks["a"] and claim.known == 0
    assert [m.text for m in claim.messages] == ["first"]
