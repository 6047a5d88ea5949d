"""What the MongoDB store's migrations do beyond every server store's (those:
tests/stores/test_server_migrations.py): the index, reads before the migrations, the
layout of ``create_indexes``, and a database of layout 1 converted by step 2."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pymongo.asynchronous.database import AsyncDatabase

from steerable import codec
from steerable.errors import InvalidMessage, StoreUnavailable
from steerable.messages import Message, user
from steerable.store import Steer
from steerable.stores.mongodb import COLLECTIONS, MIGRATIONS, MongoStore, migrate
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
