"""The MongoDB store keeps the whole service store contract, on a SecantusDB server.

The same lifespan and store factory as the store contract's (a database migrated once,
dropped at the end); beside the cases, what is MongoDB's own: hints over a change stream
from another client, a write refused whole when a claim took the session from under it,
and step 3 of the migrations keeping what a database of version 2 held.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from pymongo import AsyncMongoClient
from pymongo.asynchronous.database import AsyncDatabase

from steerable.errors import CorruptRecord, Fenced, InvalidMessage, StoreUnavailable
from steerable.messages import Message, assistant, user
from steerable.service_store import Hint, Input, Known, Notifying, Outcome, ServiceStore
from steerable.stores.mongodb import MIGRATIONS, SCHEMA_VERSION, MongoStore, migrate
from steerable.stores.mongodb._migrate import SCHEMA
from steerable.testing import OpenStore, ServiceContract
from tests.stores.mongodb._server import URI_VARIABLE, scratch_database
from tests.stores.mongodb.test_mongodb_contract import _client, _database, open_store
from tests.stores.relay import Relay

pytestmark = pytest.mark.usefixtures("mongo_server")


@pytest.mark.filterwarnings("ignore:unclosed <socket:ResourceWarning")
@pytest.mark.store_abilities(
    "persistent",
    "processes",
    "corruptible",
    "outage",
    "lockable",
    "rewritable",
    "forkable",
    "journaled",
    "repairable",
)
class TestMongoServiceStore(ServiceContract):
    lifespan = _database

    @pytest.fixture
    def store_factory(self, store_lifespan: str) -> OpenStore:
        return functools.partial(open_store, store_lifespan)


@pytest.fixture
async def db() -> AsyncIterator[AsyncDatabase[Any]]:
    """An empty database of its own, migrated, dropped after the test."""
    async with scratch_database() as database:
        await migrate(database)
        yield database


async def test_the_store_is_a_notifying_service_store(db: AsyncDatabase[Any]) -> None:
    store = MongoStore(db)
    assert isinstance(store, ServiceStore) and isinstance(store, Notifying)


async def _next(hints: AsyncIterator[Hint]) -> Hint:
    return await asyncio.wait_for(anext(hints), 10)


async def test_hints_reach_another_client_on_commit(db: AsyncDatabase[Any]) -> None:
    """Work and stop hints, written by one client, arrive at another's change stream."""
    other: AsyncMongoClient[dict[str, Any]] = _client()
    try:
        writer, listener = MongoStore(db), MongoStore(other[db.name])
        async with listener.hints() as hints:
            await writer.enqueue("h", Input("send", "go", "t"))
            assert await _next(hints) == Hint("work", "h")
            claim = await writer.claim("a", seconds=60, cap=16, session="h")
            assert claim is not None
            await writer.enqueue("h", Input("send", "next", "b"))  # a turn runs: no hint
            assert await writer.stop("h") == "t"
            assert await _next(hints) == Hint("stop", "h"), "the second send made no hint"
            assert await writer.end_turn(claim.lease, Outcome("stopped")) == "b"
            assert await _next(hints) == Hint("work", "h")
    finally:
        await other.close()


async def test_a_fenced_step_writes_nothing_in_any_collection(db: AsyncDatabase[Any]) -> None:
    """Behind the store's back: no document of any collection changed by the stale step."""
    store = MongoStore(db)
    await store.enqueue("f", Input("send", "go", "t"))
    a = await store.claim("a", seconds=0.2, cap=16, session="f")
    assert a is not None
    await store.step(a.lease, [a.prompt.message(steered=False)], at=0, take=16)
    await store.enqueue("f", Input("steer", "wait", "s"))
    await asyncio.sleep(0.6)
    assert await store.claim("b", seconds=60, cap=16, session="f") is not None

    async def everything() -> dict[str, list[dict[str, Any]]]:
        names = sorted(await db.list_collection_names())
        return {n: await db[n].find({}, {"now": 0}).to_list(None) for n in names}

    before = await everything()
    with pytest.raises(Fenced):
        await store.step(a.lease, [assistant("stale " * 20_000)], at=1, take=16)  # a blob too
    assert await everything() == before


async def test_step_3_keeps_a_database_of_version_2() -> None:
    """A database at version 2 with a transcript: migrating adds the service, loses nothing."""
    async with scratch_database() as db:
        earlier = [m.version for m in MIGRATIONS if m.version < 3]
        for migration in MIGRATIONS[:2]:
            for part in migration.steps:
                await part(db)
            await db[SCHEMA].insert_one({"_id": migration.version})
        store = MongoStore(db)
        with pytest.raises(StoreUnavailable, match=r"step 3"):
            await store.check_schema()
        await db["steerable_sessions"].insert_one(
            {"_id": "x", "s": "x", "n": 0, "base": 0, "tb": 0, "mv": 0, "tail": [], "k": []}
        )
        assert earlier == [1, 2]
        assert await migrate(db) == [3, 4, 5, 6] and SCHEMA_VERSION == 6
        store = MongoStore(db)
        await store.save("x", [user("kept")], at=0)
        await store.enqueue("x", Input("send", "then", "t"))
        claim = await store.claim("a", seconds=60, cap=16, session="x")
        assert claim is not None and [m.text for m in claim.messages] == ["kept"]
        assert claim.start == 1


async def test_a_claim_reads_only_the_chunks_after_what_the_claimer_knows(
    db: AsyncDatabase[Any],
) -> None:
    """A transcript flushed into chunks: knowing any length under the mark, a claim returns
    exactly the messages after it, from the chunk it falls in, the later ones and the head's
    tail; the chunks before it are not read (one taken away behind the store's back breaks
    a whole read, not that claim)."""
    store = MongoStore(db)
    sid = "chunked"
    stored = [user(f"{n}: " + "x" * 9_000, id=f"m-{n}") for n in range(14)]
    for n, message in enumerate(stored):
        await store.save(sid, [message], at=n)
    chunks = await db["steerable_chunks"].find({"_id.s": sid}).sort("_id.p", 1).to_list(None)
    ends = [int(chunk["e"]) for chunk in chunks]
    assert len(ends) >= 3 and ends[-1] < len(stored), "the test wants chunks and a tail"
    await store.enqueue(sid, Input("send", "first"))
    first = await store.claim("r", seconds=60, cap=16, session=sid)
    assert first is not None and first.messages == stored and first.mark
    await store.end_turn(first.lease, Outcome("completed"))
    for length in (1, ends[0] - 1, ends[0], ends[0] + 1, ends[-1], len(stored) - 1, 14):
        await store.enqueue(sid, Input("send", f"knowing {length}"))
        claim = await store.claim(
            "r", seconds=60, cap=16, session=sid, known={sid: Known(length, first.mark)}
        )
        assert claim is not None and (claim.known, claim.mark) == (length, first.mark)
        assert claim.messages == stored[length:], length
        assert claim.start == len(stored)
        await store.end_turn(claim.lease, Outcome("completed"))
    await db["steerable_chunks"].delete_one({"_id": chunks[1]["_id"]})
    with pytest.raises(CorruptRecord):
        await store.messages(sid)
    for length in (ends[1], ends[1] + 1):
        await store.enqueue(sid, Input("send", f"past the chunk taken, knowing {length}"))
        known = {sid: Known(length, first.mark)}
        claim = await store.claim("r", seconds=60, cap=16, session=sid, known=known)
        assert claim is not None and claim.messages == stored[length:]
        await store.end_turn(claim.lease, Outcome("completed"))


class _Racing(MongoStore):
    """A store that runs ``race`` once, right after a claim's read of the messages."""

    race: Callable[[], Awaitable[object]] | None = None
    raced = 0

    async def _messages_from(
        self, session: str, head: dict[str, Any] | None, first: int
    ) -> list[Message]:
        found = await super()._messages_from(session, head, first)
        if self.race is not None:
            race, self.race = self.race, None
            await race()
            self.raced += 1
        return found


async def test_a_replace_between_a_claim_and_its_read_makes_it_read_the_whole(
    db: AsyncDatabase[Any],
) -> None:
    """The claim reads the messages after its transaction; a ``replace`` (not refused while
    the turn runs) that lands then changes what the claimer holds: the claim reads the whole
    transcript again, under no mark, rather than hand over the rest of another one."""
    store = _Racing(db)
    sid = "raced"
    await store.enqueue(sid, Input("send", "one"))
    first = await store.claim("r", seconds=60, cap=16, session=sid)
    assert first is not None
    await store.step(first.lease, [first.prompt.message(steered=False)], at=0, take=16)
    await store.step(first.lease, [assistant("re: one")], at=1, take=0)
    await store.end_turn(first.lease, Outcome("completed"))
    stored = await store.messages(sid)
    changed = assistant("changed", id=stored[1].id)
    store.race = functools.partial(store.replace, sid, at=1, old=[stored[1].id], messages=[changed])
    await store.enqueue(sid, Input("send", "two"))
    known = {sid: Known(2, first.mark)}
    claim = await store.claim("r", seconds=60, cap=16, session=sid, known=known)
    assert store.raced == 1, "the replace did not run"
    assert claim is not None and (claim.known, claim.mark) == (0, "")
    assert [m.text for m in claim.messages] == ["one", "changed"]


@pytest.fixture
def collected() -> Iterator[None]:
    """Garbage collected after the test, under its warning filter: pymongo leaves the socket
    of a refused connection to the collector (PYTHON-5867)."""
    yield
    gc.collect()


@pytest.mark.filterwarnings("ignore:unclosed <socket:ResourceWarning")
@pytest.mark.usefixtures("collected")
async def test_a_lost_server_is_store_unavailable_at_once(db: AsyncDatabase[Any]) -> None:
    """Every verb, with the server gone: StoreUnavailable, not a transaction retried for
    minutes (the test's timeout would end it first)."""
    address = urlsplit(os.environ[URI_VARIABLE])
    relay = Relay(address.hostname or "127.0.0.1", address.port or 27017)
    await relay.restore()
    uri = f"mongodb://127.0.0.1:{relay.port}/?directConnection=true"
    client = _client(uri, serverSelectionTimeoutMS=300)
    try:
        store = MongoStore(client[db.name])
        await store.enqueue("o", Input("send", "go", "t"))
        claim = await store.claim("a", seconds=60, cap=16, session="o")
        assert claim is not None
        await relay.cut()
        for call in (
            lambda: store.enqueue("o", Input("send", "more")),
            lambda: store.claim("b", seconds=60, cap=16),
            lambda: store.step(claim.lease, [user("x")], at=0, take=16),
            lambda: store.renew(claim.lease, seconds=60),
            lambda: store.end_turn(claim.lease, Outcome("completed")),
            lambda: store.stop("o"),
            lambda: store.status("o"),
            lambda: store.events("o", after=0, limit=10),
        ):
            with pytest.raises(StoreUnavailable):
                await call()
    finally:
        await client.close()
        await relay.cut()


async def test_a_step_refuses_a_message_id_stored_before(db: AsyncDatabase[Any]) -> None:
    """In the head's tail or in a chunk's id list: InvalidMessage, and nothing written."""
    store = MongoStore(db)
    await store.enqueue("d", Input("send", "go", "t"))
    claim = await store.claim("a", seconds=60, cap=16, session="d")
    assert claim is not None
    await store.step(claim.lease, [claim.prompt.message(steered=False)], at=0, take=0)
    big = [assistant("x" * 40_000, id="big"), user("after", id="late")]  # flushed to a chunk
    await store.step(claim.lease, big, at=1, take=0)
    head = await db["steerable_sessions"].find_one({"_id": "d"})
    assert head is not None and head["base"] == 3 and head["tail"] == []
    await store.step(claim.lease, [user("in the tail", id="tail")], at=3, take=0)
    events = await store.events("d", after=0, limit=100)
    for old in ("t", "big", "tail"):
        with pytest.raises(InvalidMessage, match="already"):
            await store.step(claim.lease, [user("again", id=old)], at=4, take=16)
    assert [m.id for m in await store.messages("d")] == ["t", "big", "late", "tail"]
    assert await store.events("d", after=0, limit=100) == events
