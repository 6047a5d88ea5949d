"""What the MongoDB service store promises beyond the service contract about its queue:
the commands of a step, an end and a status (the counters save the reads that would find
no offered steer; a status reads only the inputs it returns), the stop poll on its index,
and a refused enqueue that leaves nothing behind."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import pytest
from pymongo import AsyncMongoClient, monitoring
from pymongo.asynchronous.database import AsyncDatabase

from steerable.errors import QueueFull, SessionNotIdle, TurnMismatch
from steerable.messages import assistant, user
from steerable.service_store import Input, Outcome
from steerable.stores.mongodb import MongoStore, migrate
from steerable.stores.mongodb._service import stops_cursor
from tests.stores.mongodb._server import URI_VARIABLE, scratch_database

pytestmark = pytest.mark.usefixtures("mongo_server")


class Sent(monitoring.CommandListener):
    """Each command sent while recording, as ``name:collection``, and the replies' sizes."""

    def __init__(self) -> None:
        self.commands: list[str] | None = None
        self.returned: list[int] = []

    @contextmanager
    def recording(self) -> Iterator[list[str]]:
        self.commands, self.returned = [], []
        try:
            yield self.commands
        finally:
            self.commands = None

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if self.commands is not None:
            target = event.command.get(event.command_name)
            named = isinstance(target, str) and target.startswith("steerable_")
            self.commands.append(f"{event.command_name}:{target}" if named else event.command_name)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        if self.commands is not None and event.command_name == "find":
            self.returned.append(len(event.reply["cursor"]["firstBatch"]))

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


@pytest.fixture
async def db() -> AsyncIterator[AsyncDatabase[Any]]:
    """An empty database of its own, migrated, dropped after the test."""
    async with scratch_database() as database:
        await migrate(database)
        yield database


@asynccontextmanager
async def _recorded(db: AsyncDatabase[Any]) -> AsyncIterator[tuple[MongoStore, Sent]]:
    """A store on ``db`` over a client of its own whose commands are recorded."""
    sent = Sent()
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        os.environ[URI_VARIABLE], event_listeners=[sent]
    )
    try:
        store = MongoStore(client[db.name])
        await store.check_schema()  # the version, read once: not counted below
        yield store, sent
    finally:
        await client.close()


LOCK = "findAndModify:steerable_service"
TURN = "find:steerable_turns"
HEAD = "find:steerable_sessions"
APPEND = "findAndModify:steerable_sessions"
OFFERED = "find:steerable_inputs"
WRITES = ["update:steerable_turns", "update:steerable_service", "insert:steerable_events"]


async def test_a_step_reads_offered_steers_only_when_some_are(db: AsyncDatabase[Any]) -> None:
    """No steer offered: no read of the inputs (the counters say so); one offered: read,
    checked against the chunks' id lists, taken. Nothing else is sent."""
    async with _recorded(db) as (store, sent):
        await store.enqueue("r", Input("send", "go", "t"))
        claim = await store.claim("a", seconds=60, cap=16, session="r")
        assert claim is not None
        with sent.recording() as commands:
            await store.step(claim.lease, [claim.prompt.message(steered=False)], at=0, take=16)
        assert commands == [LOCK, TURN, HEAD, APPEND, *WRITES, "commitTransaction"]
        await store.enqueue("r", Input("steer", "and", "s"))
        with sent.recording() as commands:
            taken = await store.step(claim.lease, [assistant("x"), user("r")], at=1, take=16)
        assert [m.id for m in taken] == ["s"]
        took = [OFFERED, HEAD, APPEND, "update:steerable_inputs"]
        assert commands == [LOCK, TURN, HEAD, *took, *WRITES, "commitTransaction"]


async def test_an_end_reads_offered_steers_only_when_some_are(db: AsyncDatabase[Any]) -> None:
    """Nothing offered: the end reads the inputs once (the next prompt); a steer offered:
    once more, and frees it."""
    async with _recorded(db) as (store, sent):
        await store.enqueue("e", Input("send", "go", "t"))
        claim = await store.claim("a", seconds=60, cap=16, session="e")
        assert claim is not None
        with sent.recording() as commands:
            await store.end_turn(claim.lease, Outcome("completed"))
        assert commands.count(OFFERED) == 1 and "update:steerable_inputs" not in commands
        await store.enqueue("e", Input("send", "again", "u"))
        claim = await store.claim("a", seconds=60, cap=16, session="e")
        assert claim is not None
        await store.enqueue("e", Input("steer", "late", "s"))
        with sent.recording() as commands:
            await store.end_turn(claim.lease, Outcome("stopped"))
        assert commands.count(OFFERED) == 2 and commands.count("update:steerable_inputs") == 1
        ended = (await store.events("e", after=0, limit=100))[-1]
        assert ended.data == {"state": "stopped", "released": ["s"]}


async def test_a_status_reads_only_the_inputs_it_returns(db: AsyncDatabase[Any]) -> None:
    """Sixty inputs wait: a status of limit 3 gets 3 input documents and the counts."""
    store = MongoStore(db)
    for i in range(60):
        await store.enqueue("w", Input("send", f"m{i}", f"m{i}"))
    async with _recorded(db) as (reader, sent):
        with sent.recording() as commands:
            status = await reader.status("w", limit=3)
    assert [w.id for w in status.waiting] == ["m0", "m1", "m2"]
    assert (status.waiting_total, status.queued) == (60, 60)
    assert commands == ["find:steerable_service", "find:steerable_inputs"]
    assert sent.returned == [1, 3]


async def test_the_stop_poll_scans_its_index(db: AsyncDatabase[Any]) -> None:
    """Only the holder's sessions are examined, however many sessions there are."""
    service = db["steerable_service"]
    docs = [{"_id": f"s{i:03}", "h": f"h{i % 10}", "sr": i % 20 == 0} for i in range(200)]
    await service.insert_many(docs)
    plan = await stops_cursor(service, "h0").explain()
    assert "IXSCAN" in str(plan["queryPlanner"]["winningPlan"])
    assert "COLLSCAN" not in str(plan["queryPlanner"]["winningPlan"])
    assert plan["executionStats"]["totalDocsExamined"] <= 10
    found = await stops_cursor(service, "h0").to_list(None)
    assert [d["_id"] for d in found] == [f"s{i:03}" for i in range(0, 200, 20)]


async def test_a_refused_enqueue_leaves_no_trace(db: AsyncDatabase[Any]) -> None:
    """Behind the store's back: no document of any collection changed, the lock's ``now``
    included, and no service document made for a session that had none."""
    store = MongoStore(db)
    await store.enqueue("q", Input("send", "go", "t"))

    async def everything() -> dict[str, list[dict[str, Any]]]:
        names = sorted(await db.list_collection_names())
        return {n: await db[n].find({}).to_list(None) for n in names}

    before = await everything()
    refusals = [
        store.enqueue("q", Input("send", "x"), if_idle=True),
        store.enqueue("q", Input("steer", "x"), expected_turn="other"),
        store.enqueue("q", Input("send", "x"), max_waiting=1),
        store.enqueue("new", Input("steer", "x"), expected_turn="t"),
        store.enqueue("new", Input("send", "x"), max_waiting=0),
    ]
    for refusal in refusals:
        with pytest.raises((SessionNotIdle, TurnMismatch, QueueFull)):
            await refusal
    assert await everything() == before
