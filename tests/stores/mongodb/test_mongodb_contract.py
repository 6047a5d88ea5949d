"""The MongoDB store keeps the whole store contract, on a SecantusDB server.

The lifespan migrates the database once (what an application runs when it deploys) and drops
the database at the end. Its hooks: a head document damaged behind the store's back, a
relay in front of the server that the test cuts, and the race for one position held by
a transaction that has written the session's head: a write outside it waits until it
ends (SecantusDB and mongod alike), and the waiting saves show in ``currentOp``.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import pytest
from pymongo import AsyncMongoClient

from steerable.store import Store
from steerable.stores.mongodb import MongoStore, migrate
from steerable.testing import OpenStore, StoreContract
from tests.stores.mongodb._server import URI_VARIABLE
from tests.stores.relay import Relay, RelayLine

pytestmark = pytest.mark.usefixtures("mongo_server")

DATABASE = f"steerable_contract_{uuid.uuid4().hex[:12]}"  # fresh on every run


def _client(uri: str | None = None, **options: Any) -> AsyncMongoClient[dict[str, Any]]:
    return AsyncMongoClient(uri or os.environ[URI_VARIABLE], **options)


@asynccontextmanager
async def open_store(database: str) -> AsyncIterator[MongoStore]:
    """A store on ``database`` over a client of its own (module level: it pickles)."""
    client = _client()
    try:
        yield MongoStore(client[database])
    finally:
        await client.close()


@asynccontextmanager
async def _database() -> AsyncIterator[str]:
    client = _client()
    try:
        await migrate(client[DATABASE])
        yield DATABASE
        await client.drop_database(DATABASE)
    finally:
        await client.close()


def _heads(store: Store) -> Any:
    assert isinstance(store, MongoStore)
    return store.db["steerable_sessions"]


class _HeadHeld:
    """The session's head written by an open transaction; the saves behind it counted."""

    def __init__(self, client: AsyncMongoClient[dict[str, Any]]) -> None:
        self.client = client

    async def until_waiting(self, count: int) -> None:
        for _ in range(2000):
            ops = (await self.client.admin.command("currentOp"))["inprog"]
            if sum(1 for op in ops if op.get("op") == "findAndModify") >= count:
                return
            await asyncio.sleep(0.005)
        raise AssertionError(f"{count} saves never waited for the session's head")


# pymongo 4.20's AsyncMongoClient leaves the socket of a refused connection to the garbage
# collector (PYTHON-5867); the outage hook collects it itself, so no later test trips on it.
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
class TestMongoStore(StoreContract):
    lifespan = _database

    @pytest.fixture
    def store_factory(self, store_lifespan: str) -> OpenStore:
        return functools.partial(open_store, store_lifespan)

    async def corrupt_message(self, store: Store, session: str, position: int) -> None:
        head = await _heads(store).find_one({"_id": session}, {"base": 1})
        index = position - int(head["base"])
        assert index >= 0, "the message is in a chunk; the hook damages the head's tail"
        await _heads(store).update_one({"_id": session}, {"$set": {f"tail.{index}.b": '{"v":1'}})

    async def corrupt_steer(self, store: Store, session: str, steer_id: str) -> None:
        await _heads(store).update_one(
            {"_id": session, "box.i": steer_id}, {"$set": {"box.$.b": "garbage"}}
        )

    @asynccontextmanager
    async def outage(self) -> AsyncIterator[RelayLine]:
        address = urlsplit(os.environ[URI_VARIABLE])
        relay = Relay(address.hostname or "127.0.0.1", address.port or 27017)
        await relay.restore()
        uri = f"mongodb://127.0.0.1:{relay.port}/?directConnection=true"
        client = _client(uri, serverSelectionTimeoutMS=400)
        try:
            yield RelayLine(relay, MongoStore(client[DATABASE]))
        finally:
            await client.close()
            await relay.cut()
            gc.collect()

    @asynccontextmanager
    async def hold_steer(self, store: Store, session: str) -> AsyncIterator[_HeadHeld]:
        client = _client()
        try:
            async with client.start_session() as held:
                await held.start_transaction()
                try:
                    heads = client[DATABASE]["steerable_sessions"]
                    # the head, whether or not a steer waits in it: every save of the
                    # session waits for it
                    done = await heads.update_one(
                        {"_id": session}, {"$set": {"held": True}}, session=held
                    )
                    assert done.modified_count == 1, "no session to hold"
                    yield _HeadHeld(client)
                finally:
                    await held.abort_transaction()
        finally:
            await client.close()
