"""What the MongoDB store promises beyond the shared contract, against a real server.

All-or-nothing under SIGKILL at every command of a save and of its flush, blobs and
chunks kept across a server restart, one command per save-and-take step, and ids refused
across the whole transcript by the unique index. The migrations: test_mongodb_migrations.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import json
import multiprocessing
import os
import signal
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from pymongo import AsyncMongoClient, monitoring

from steerable.errors import InvalidMessage, StoreUnavailable
from steerable.messages import Message, ToolCall, ToolResult, assistant, new_id, user
from steerable.service_store import Input, Outcome
from steerable.store import Steer
from steerable.stores.mongodb import MongoStore, migrate
from tests.stores.mongodb._server import (
    URI_VARIABLE,
    SecantusServer,
    free_port,
    open_store,
    sync_client,
)

pytestmark = pytest.mark.usefixtures("mongo_server")

DATABASE = f"steerable_store_{uuid.uuid4().hex[:12]}"
store_in_test_db = functools.partial(open_store, DATABASE)


def _sid() -> str:
    return f"mongo-{new_id()}"


class Commands(monitoring.CommandListener):
    """Records the name of every command the client sends while recording."""

    def __init__(self) -> None:
        self.names: list[str] | None = None

    @contextmanager
    def recording(self) -> Iterator[list[str]]:
        names: list[str] = []
        self.names = names
        try:
            yield names
        finally:
            self.names = None

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if self.names is not None:
            self.names.append(event.command_name)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def _head(sid: str) -> dict[str, Any]:
    """The session's head document, read behind the store's back."""
    with sync_client(os.environ[URI_VARIABLE]) as client:
        head: dict[str, Any] | None = client[DATABASE]["steerable_sessions"].find_one(sid)
    assert head is not None
    return head


# -- two writers ------------------------------------------------------------------------


# -- all or nothing under SIGKILL ---------------------------------------------------------

STEERS = ("k-1", "k-2", "k-3")
PRIOR = 4  # messages stored (and flushed to a chunk) before the save that is killed
# the save: a blob, the findAndModify, then a flush (mark, chunk, id list, commit)
SAVE_COMMANDS = ["insert", "findAndModify", "findAndModify", "insert", "insert", "update"]
# a new store object reads the schema version once, before its first write
KILLED_COMMANDS = ["find", *SAVE_COMMANDS]
COMMIT = KILLED_COMMANDS.index("findAndModify")


async def _prepare(store: MongoStore, sid: str) -> list[Message]:
    """A session with a chunk and an empty tail, and three steers waiting."""
    prior = [user(f"{i}" * 10_000, id=f"prior-{i}") for i in range(PRIOR)]
    await store.save(sid, prior, at=0)  # over the flush threshold: all four go to a chunk
    for steer_id in STEERS:
        await store.steer(sid, Steer(f"steer {steer_id}", steer_id))
    assert _head(sid)["base"] == PRIOR
    return prior


def _new_messages() -> list[Message]:
    """The killed save: one body big enough for a blob, one that tips the tail into a flush."""
    return [assistant("B" * 100_000, id="new-big"), user("s" * 33_000, id="new-small")]


def _save_and_die(uri: str, database: str, sid: str, event: str, index: int) -> None:
    """In a child process: the save, SIGKILLing this process at one command's event."""

    class Killer(monitoring.CommandListener):
        done = 0

        def started(self, started: monitoring.CommandStartedEvent) -> None:
            if event == "started" and self.done == index:
                os.kill(os.getpid(), signal.SIGKILL)  # before the command is sent

        def succeeded(self, succeeded: monitoring.CommandSucceededEvent) -> None:
            if event == "succeeded" and self.done == index:
                os.kill(os.getpid(), signal.SIGKILL)  # after the server answered it
            self.done += 1

        def failed(self, failed: monitoring.CommandFailedEvent) -> None:
            self.done += 1

    async def save() -> None:
        client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(uri, event_listeners=[Killer()])
        await MongoStore(client[database]).save(sid, _new_messages(), at=PRIOR, take=2)
        await client.close()

    asyncio.run(save())


async def test_a_save_killed_at_any_command_is_stored_whole_or_not_at_all() -> None:
    points = [(event, i) for i in range(len(KILLED_COMMANDS)) for event in ("started", "succeeded")]
    sids = {point: _sid() for point in points}
    context = multiprocessing.get_context("spawn")
    loop = asyncio.get_running_loop()
    async with store_in_test_db() as store:
        for sid in sids.values():
            prior = await _prepare(store, sid)
        children = {
            point: context.Process(
                target=_save_and_die, args=(os.environ[URI_VARIABLE], DATABASE, sid, *point)
            )
            for point, sid in sids.items()
        }
        for child in children.values():
            child.start()
        for child in children.values():
            await loop.run_in_executor(None, child.join, 60)
        for (event, index), sid in sids.items():
            child = children[event, index]
            assert child.exitcode == -signal.SIGKILL, f"{event} {index}: not killed there"
            committed = index > COMMIT or (index == COMMIT and event == "succeeded")
            await _check_after_the_kill(store, sid, prior, committed)


async def _check_after_the_kill(
    store: MongoStore, sid: str, prior: list[Message], committed: bool
) -> None:
    messages = await store.messages(sid)
    taken = [m.id for m in messages if m.steered]
    waiting = [s.id for s in await store.steers(sid)]
    if committed:
        assert [m.id for m in messages] == [m.id for m in prior] + ["new-big", "new-small"] + taken
        assert messages[PRIOR : PRIOR + 2] == _new_messages()
    else:
        assert messages == prior
    assert taken + waiting == list(STEERS), "a steer was lost or handed over twice"
    # wherever the kill left the flush, every id stored is refused, as a message or a steer
    stored = [m.id for m in messages]
    for known in ("prior-0", *stored[PRIOR:]):
        with pytest.raises(InvalidMessage, match=known):
            await store.save(sid, [user("again", id=known)], at=len(messages), take=16)
        await store.steer(sid, Steer("sent again", known))
    assert [s.id for s in await store.steers(sid)] == waiting
    # the next save goes on from there, and adopts whatever a dead flusher left
    more = await store.save(sid, [assistant("next")], at=len(messages), take=16)
    after = await store.messages(sid)
    assert after[: len(messages)] == messages
    assert [m.text for m in after[len(messages) :]] == ["next"] + [m.text for m in more]
    assert [m.id for m in after if m.steered] == list(STEERS)
    head = _head(sid)
    assert head["mv"] == 0, "a flush was left marked"
    if committed:
        assert head["base"] >= PRIOR + 2, "the flush was not finished"
    # every id is still refused, wherever the kill left it (chunk or tail)
    for known in ["prior-0", *STEERS, *(["new-big", "new-small"] if committed else [])]:
        with pytest.raises(InvalidMessage, match=known):
            await store.save(sid, [user("again", id=known)], at=len(after))
    assert len(await store.messages(sid)) == len(after)


# -- the server going away ---------------------------------------------------------------


# pymongo 4.20's AsyncMongoClient leaves the socket of a refused connection to the garbage
# collector (PYTHON-5867); these tests collect it themselves, so no later test trips on it.
_refused_sockets = pytest.mark.filterwarnings("ignore:unclosed <socket:ResourceWarning")


@_refused_sockets
def test_blobs_and_chunks_are_kept_across_a_server_restart(tmp_path: Path) -> None:
    # The suite's outage case cuts the line and checks every verb; this one stops the
    # server itself, once the transcript has an out-of-line body and a flushed chunk.
    asyncio.run(_blobs_and_chunks_across_a_restart(SecantusServer(tmp_path / "data")))
    gc.collect()


async def _blobs_and_chunks_across_a_restart(server: SecantusServer) -> None:
    await asyncio.to_thread(server.start)
    sid = _sid()
    try:
        async with _store_on(server) as store:
            await migrate(store.db)
            await store.save(sid, [user("x" * 70_000), user("y" * 60_000)], at=0)  # a blob
            await store.save(sid, [user(f"{i}" * 50_000) for i in range(6)], at=2)  # a flush
            await store.steer(sid, Steer("waiting", "s-1"))
            before = await store.messages(sid)
        assert _base_of(server, sid) > 0, "no chunk was written: the test tests less"
        await asyncio.to_thread(server.stop)
        await asyncio.to_thread(server.start)  # same data, same port
        async with _store_on(server) as store:  # a new client: it waits for the server
            assert await store.messages(sid) == before
            taken = await store.save(sid, [assistant("back")], at=len(before), take=16)
            assert [m.id for m in taken] == ["s-1"]
    finally:
        await asyncio.to_thread(server.stop)


@asynccontextmanager
async def _store_on(server: SecantusServer) -> AsyncIterator[MongoStore]:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(server.uri)
    try:
        yield MongoStore(client[DATABASE])
    finally:
        await client.close()


def _base_of(server: SecantusServer, sid: str) -> int:
    with sync_client(server.uri) as client:
        head = client[DATABASE]["steerable_sessions"].find_one(sid)
    return int(head["base"]) if head else 0


@_refused_sockets
def test_a_closed_port_is_store_unavailable() -> None:
    asyncio.run(_read_from_a_closed_port())
    gc.collect()


async def _read_from_a_closed_port() -> None:
    uri = f"mongodb://127.0.0.1:{free_port()}/?directConnection=true"
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(uri, serverSelectionTimeoutMS=200)
    try:
        with pytest.raises(StoreUnavailable, match="MongoDB cannot be reached to read session"):
            await MongoStore(client["nowhere"]).messages("s")
    finally:
        await client.close()


# -- round trips ---------------------------------------------------------------------------


def _step(step: int) -> list[Message]:
    """A step of about 2 KB: a reply with a tool call and its result."""
    call = ToolCall(f"c{step}", "search", json.dumps({"q": "leases " * 140}))
    reply = Message("assistant", (call,))
    return [reply, Message("user", (ToolResult(call.id, "search", "found " * 170),))]


FLUSH = ["findAndModify", "insert", "insert", "update"]  # mark, chunk, id list, commit


async def test_a_step_nobody_steers_is_one_command() -> None:
    sid, commands, steps = _sid(), Commands(), 100
    async with store_in_test_db(event_listeners=[commands]) as store:
        with commands.recording() as sent:
            await store.save(sid, [user("go")], at=0, take=16)
        assert sent == ["find", "findAndModify"]  # the schema version is read once
        at, total, flushes = 1, 0, 0
        for step in range(steps):
            with commands.recording() as sent:
                taken = await store.save(sid, _step(step), at=at, take=16)
            assert taken == []
            assert sent in (["findAndModify"], ["findAndModify", *FLUSH]), sent
            total, flushes, at = total + len(sent), flushes + (len(sent) > 1), at + 2
        # ~2.2 KB a step, a flush every 32 KiB: one in about 15 steps, four commands each
        assert 5 <= flushes <= 10 and total == steps + 4 * flushes
        assert total / steps <= 1.4
        with commands.recording() as sent:
            assert await store.take_steers(sid, at=None, limit=16) == []
        assert sent == ["findAndModify"]

        with commands.recording() as sent:
            await store.steer(sid, Steer("use celsius", "s-1"))
        assert sent == ["update"]
        with commands.recording() as sent:
            taken = await store.save(sid, [assistant("ok")], at=at, take=16)
        assert sent[0] == "findAndModify" and [m.id for m in taken] == ["s-1"]
        with commands.recording() as sent:
            await store.steers(sid)
            transcript = await store.messages(sid)
        assert sent == ["find", "find", "find"]  # steers; the head, then its chunks
        assert len(transcript) == at + 2


async def test_an_end_with_its_last_save_is_three_commands_fewer_than_a_step_and_an_end() -> None:
    """One transaction (one commit), the end going on under the lock the step's part took
    (no second fence) and knowing the length the save leaves (no read of it)."""
    commands = Commands()
    async with store_in_test_db(event_listeners=[commands]) as store:
        sent: dict[bool, list[str]] = {}
        for together in (False, True):
            sid = _sid()
            await store.enqueue(sid, Input("send", "go", "p"))
            claim = await store.claim("a", seconds=60, cap=16, session=sid)
            assert claim is not None
            await store.step(claim.lease, [user("go", id="p")], at=0, take=16)
            done, answer = Outcome("completed"), [assistant("a")]
            with commands.recording() as names:
                if together:
                    await store.end_turn(claim.lease, done, last=answer, at=1)
                else:
                    await store.step(claim.lease, answer, at=1, take=0, final=True)
                    await store.end_turn(claim.lease, done)
            sent[together] = list(names)
            assert [m.text for m in await store.messages(sid)] == ["go", "a"]
        apart, together_ = sent[False], sent[True]
        assert len(together_) == len(apart) - 3, (apart, together_)
        assert together_.count("commitTransaction") == apart.count("commitTransaction") - 1 == 1
        assert together_.count("findAndModify") == apart.count("findAndModify") - 1
        assert together_.count("find") == apart.count("find") - 1


async def test_the_commands_of_a_save_with_a_blob_and_a_flush() -> None:
    """The sequence the SIGKILL test kills at, one command after another."""
    sid, commands = _sid(), Commands()
    async with store_in_test_db(event_listeners=[commands]) as store:
        await _prepare(store, sid)
        with commands.recording() as sent:
            taken = await store.save(sid, _new_messages(), at=PRIOR, take=2)
        assert sent == SAVE_COMMANDS
        assert [m.id for m in taken] == list(STEERS[:2])


# -- documents and limits ----------------------------------------------------------------


async def test_raw_json_is_a_string_in_the_document_never_bson() -> None:
    sid, raw = _sid(), '{"z":1,"a":[1, 2],"z":3}'
    async with store_in_test_db() as store:
        await store.save(sid, [Message("assistant", (ToolCall("c", "f", raw),))], at=0)
        assert (await store.messages(sid))[0].tool_calls[0].arguments == raw
    body = _head(sid)["tail"][0]["b"]
    assert isinstance(body, str)
    assert json.dumps(raw) in body


async def test_a_long_transcript_keeps_the_head_small_and_comes_back_whole() -> None:
    sid = _sid()
    sizes = [10, 70_000, 3_000, 200, 40_000, 5]  # some over 64 KiB: blobs
    messages = [user(str(i % 10) * sizes[i % len(sizes)]) for i in range(240)]
    async with store_in_test_db() as store:
        for at in range(0, len(messages), 8):
            await store.save(sid, messages[at : at + 8], at=at)
        huge = [user("h" * 5_000_000), user("\U0001f600" * 2_500_000)]  # 15 MiB in one save
        await store.save(sid, huge, at=len(messages))
        assert await store.messages(sid) == messages + huge
    head = _head(sid)
    assert head["base"] > 0 and len(head["tail"]) < len(messages) and len(head["k"]) <= 8
    with sync_client(os.environ[URI_VARIABLE]) as client:
        size = client[DATABASE].command(
            "aggregate",
            "steerable_sessions",
            cursor={},
            pipeline=[{"$match": {"_id": sid}}, {"$project": {"z": {"$bsonSize": "$$ROOT"}}}],
        )["cursor"]["firstBatch"][0]["z"]
    assert size < 256 * 1024, f"the head holds {size} bytes"


async def test_ids_already_flushed_are_still_refused_and_steers_still_known() -> None:
    sid = _sid()
    async with store_in_test_db() as store:
        await store.steer(sid, Steer("early", "s-1"))
        await store.save(sid, [user("first", id="m-1")], at=0, take=1)
        bulk = [user("x" * 20_000) for _ in range(8)]  # pushes m-1 and s-1 into a chunk
        await store.save(sid, bulk[:4], at=2)
        await store.save(sid, bulk[4:], at=6)
        assert _head(sid)["base"] == 10 and _head(sid)["tail"] == []
        await store.steer(sid, Steer("waiting", "s-2"))
        for old in ("m-1", "s-1", bulk[0].id):  # in a chunk: the unique index refuses it
            with pytest.raises(InvalidMessage, match=old):
                await store.save(sid, [user("new"), user("again", id=old)], at=10, take=16)
        await store.save(sid, [user("in the tail", id="m-2")], at=10)
        with pytest.raises(InvalidMessage, match="m-2"):  # in the tail: the filter does
            await store.save(sid, [user("again", id="m-2")], at=11, take=16)
        assert [s.id for s in await store.steers(sid)] == ["s-2"], "a refused save took"
        for old in ("s-1", "m-1", "m-2"):  # a steer id seen before, as a steer or a message
            await store.steer(sid, Steer("sent again", old))
        assert [s.id for s in await store.steers(sid)] == ["s-2"]
        taken = await store.take_steers(sid, at=11, limit=16)
        assert [m.id for m in taken] == ["s-2"]
        assert len(await store.messages(sid)) == 12
