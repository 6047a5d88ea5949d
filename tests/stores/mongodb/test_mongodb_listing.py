"""The MongoDB listing of sessions beyond the contract: a range of ``_id`` in byte order,
the state filter before the limit, and ``updated_at`` the last event's time."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from pymongo.asynchronous.database import AsyncDatabase

from steerable.service_store import Input, Outcome
from steerable.stores.mongodb import MongoStore, migrate
from steerable.stores.mongodb._views import listing_cursor, listing_filter
from tests.stores.mongodb._server import scratch_database

pytestmark = pytest.mark.usefixtures("mongo_server")


@pytest.fixture
async def db() -> AsyncIterator[AsyncDatabase[Any]]:
    """An empty database of its own, migrated, dropped after the test."""
    async with scratch_database() as database:
        await migrate(database)
        yield database


def test_a_listing_is_a_range_of_the_id() -> None:
    # the bounds are on _id alone, so the _id index bounds the scan
    assert listing_filter("a/", None, None) == {
        "_id": {"$gte": "a/", "$lt": "a0"},
        "seq": {"$gt": 0},
    }
    assert listing_filter("a/", "a/x", "idle") == {
        "_id": {"$gt": "a/x", "$lt": "a0"},
        "seq": {"$gt": 0},
        "run": None,
        "q": 0,
    }
    assert listing_filter("", None, "running")["_id"] == {"$gte": ""}


async def test_a_listing_scans_the_id_index_within_the_prefix(db: AsyncDatabase[Any]) -> None:
    # the hinted _id index, bounded by the range: never a read of the other prefixes
    service = db["steerable_service"]
    docs = [{"_id": f"{p}/{i:03}", "seq": 1, "run": None, "q": 0} for p in "abc" for i in range(50)]
    await service.insert_many(docs)
    plan = await listing_cursor(service, listing_filter("b/", None, "idle"), 10).explain()
    assert "IXSCAN" in str(plan["queryPlanner"]["winningPlan"])
    assert "COLLSCAN" not in str(plan["queryPlanner"]["winningPlan"])
    assert plan["executionStats"]["totalKeysExamined"] <= 50
    assert plan["executionStats"]["totalDocsExamined"] <= 50
    found = await listing_cursor(service, listing_filter("b/", "b/044", None), 10).to_list(None)
    assert [d["_id"] for d in found] == [f"b/{i:03}" for i in range(45, 50)]


async def test_the_state_filter_comes_before_the_limit(db: AsyncDatabase[Any]) -> None:
    store = MongoStore(db)
    for name in ("p/1", "p/2", "p/3"):
        await store.enqueue(name, Input("send", "hi"))
    assert await store.claim("a", seconds=60, cap=4, session="p/1") is not None
    page = await store.sessions(prefix="p/", after=None, limit=1, state="queued")
    assert [s.session for s in page] == ["p/2"]
    page = await store.sessions(prefix="p/", after="p/2", limit=1, state="queued")
    assert [s.session for s in page] == ["p/3"]
    assert await store.sessions(prefix="p/", after="p/1", limit=1, state="running") == []
    assert await store.sessions(prefix="p/", after=None, limit=0) == []


async def test_updated_at_is_the_time_of_the_last_event(db: AsyncDatabase[Any]) -> None:
    store = MongoStore(db)
    await store.enqueue("u", Input("send", "hi"))
    claim = await store.claim("a", seconds=60, cap=4, session="u")
    assert claim is not None
    await store.stop("u")
    await store.renew(claim.lease, seconds=60)  # no event: the time stays
    await store.stop("u")  # asked already: no event either
    [listed] = await store.sessions(prefix="u", after=None, limit=10)
    events = await store.events("u", after=0, limit=100)
    assert [e.kind for e in events][-1] == "stop"
    assert listed.updated_at == events[-1].at
    await store.end_turn(claim.lease, Outcome("stopped"))
    [listed] = await store.sessions(prefix="u", after=None, limit=10)
    assert listed.updated_at == (await store.events("u", after=0, limit=100))[-1].at
    assert (listed.state, listed.turn, listed.queued) == ("idle", None, 0)
