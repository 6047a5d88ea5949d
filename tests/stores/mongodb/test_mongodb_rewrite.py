"""What the MongoDB store's truncate and delete promise beyond the contract's cases.

The contract's transcripts fit in the head; here they reach into chunks and blobs: a cut
inside a chunk, a cut that removes blobs, a cut that finishes (or calls off) a flush a dead
flusher left marked, a delete that leaves no document of the session but its service
document, none left of a session the service never saw, the cut's lock on the service
document (a claim waits for it), and a SIGKILL at every command of a cut, of a delete, of
a fork and of a replace (which take the same lock, :mod:`steerable.stores.mongodb._fork`,
:mod:`steerable.stores.mongodb._replace`).
"""

from __future__ import annotations

import asyncio
import functools
import multiprocessing
import os
import signal
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import pytest
from pymongo import AsyncMongoClient, monitoring
from pymongo.asynchronous.client_session import AsyncClientSession

from steerable import codec
from steerable.errors import InvalidMessage
from steerable.messages import Message, assistant, new_id, user
from steerable.service_store import Input, Outcome
from steerable.store import Steer
from steerable.stores.mongodb import MongoStore
from steerable.stores.mongodb import _layout as layout
from tests.stores.mongodb._server import URI_VARIABLE, open_store

pytestmark = pytest.mark.usefixtures("mongo_server")

DATABASE = f"steerable_rewrite_{uuid.uuid4().hex[:12]}"
store_in_test_db = functools.partial(open_store, DATABASE)
SESSION_COLLECTIONS = (
    "steerable_chunks",
    "steerable_inputs",
    "steerable_turns",
    "steerable_events",
)


def _sid() -> str:
    return f"cut-{new_id()}"


@pytest.fixture
async def store() -> AsyncIterator[MongoStore]:
    async with store_in_test_db() as opened:
        yield opened


async def _session(store: MongoStore, sid: str) -> list[Message]:
    """A session of every kind of document: chunks, a blob, a taken and a waiting steer,
    a tail, and the service's input, turn and events. Returns its transcript."""
    await store.enqueue(sid, Input("send", "the prompt", "p"))
    claim = await store.claim("a", seconds=60, cap=16, session=sid)
    assert claim is not None
    await store.step(claim.lease, [claim.prompt.message(steered=False)], at=0, take=0)
    await store.end_turn(claim.lease, Outcome("completed"))
    await store.save(sid, [user(f"{i}" * 10_000, id=f"big-{i}") for i in range(4)], at=1)
    await store.steer(sid, Steer("taken", "k-1"))
    blob = [assistant("B" * 100_000, id="blob"), user("s" * 33_000, id="tipping")]
    await store.save(sid, blob, at=5, take=1)
    await store.save(sid, [assistant("in the tail", id="tail")], at=8)
    await store.steer(sid, Steer("waiting", "k-2"))
    head = await _head(store, sid)
    assert head["base"] == 8 and head["n"] == 9, "the session is not as the tests expect"
    return await store.messages(sid)


async def _head(store: MongoStore, sid: str) -> dict[str, Any]:
    head: dict[str, Any] | None = await store.db["steerable_sessions"].find_one({"_id": sid})
    assert head is not None
    return head


async def _documents(store: MongoStore, sid: str) -> dict[str, int]:
    """How many documents of the session each collection holds, behind the store's back."""
    db = store.db
    counts = {
        "id lists": await db["steerable_sessions"].count_documents({"s": sid, "_id": {"$ne": sid}}),
        "heads": await db["steerable_sessions"].count_documents({"_id": sid}),
        "blobs": await db["steerable_blobs"].count_documents({"s": sid}),
        "service": await db["steerable_service"].count_documents({"_id": sid}),
    }
    for name in SESSION_COLLECTIONS:
        field = "_id.s" if name == "steerable_chunks" else "s"
        counts[name] = await db[name].count_documents({field: sid})
    return counts


# -- cuts ---------------------------------------------------------------------------------


async def test_a_cut_inside_a_chunk_shortens_it_and_its_ids_may_be_saved_again(
    store: MongoStore,
) -> None:
    sid = _sid()
    before = await _session(store, sid)
    assert await store.truncate(sid, at=3, length=9) == before[3:]
    assert await store.messages(sid) == before[:3]
    chunks = await store.db["steerable_chunks"].find({"_id.s": sid}).to_list(None)
    assert [(c["_id"]["p"], c["e"]) for c in chunks] == [(0, 3)]
    ids = await store.db["steerable_sessions"].find({"s": sid, "_id": {"$ne": sid}}).to_list(None)
    assert [(i["_id"]["p"], i["k"]) for i in ids] == [(0, ["p", "big-0", "big-1"])]
    assert (await _documents(store, sid))["blobs"] == 0
    again = [m for m in before[3:] if not m.steered]
    await store.save(sid, again, at=3)
    assert await store.messages(sid) == before[:3] + again
    await store.steer(sid, Steer("sent again", "k-1"))  # taken, then cut: still seen
    assert [s.id for s in await store.steers(sid)] == ["k-2"]
    page = await store.transcript(sid, after=-1, limit=100)
    assert [e.message for e in page] == before[:3] + again


async def test_a_cut_in_the_tail_keeps_the_chunks(store: MongoStore) -> None:
    sid = _sid()
    before = await _session(store, sid)
    assert await store.truncate(sid, at=8) == before[8:]
    assert await store.messages(sid) == before[:8]
    assert (await _documents(store, sid))["steerable_chunks"] == 2
    with pytest.raises(InvalidMessage, match="blob"):
        await store.save(sid, [user("again", id="blob")], at=8)


async def _dead_flush(store: MongoStore, sid: str) -> list[Message]:
    """Three messages, their flush marked and its chunk and id list written, then killed."""
    kept = [user("x" * 10_000, id=f"m-{i}") for i in range(3)]
    await store.save(sid, kept[:1], at=0)
    await store.save(sid, kept[1:], at=1)  # 30 KB: no flush yet
    heads = store.db["steerable_sessions"]
    head = await heads.find_one_and_update({"_id": sid}, layout.MARK_PIPELINE)
    assert head is not None and head["mv"] == 0
    await store.db["steerable_chunks"].insert_one(layout.chunk(sid, 0, head["tail"]))
    await heads.insert_one(layout.id_list(sid, 0, head["tail"]))
    return kept


async def test_a_cut_finishes_a_flush_a_dead_flusher_left_then_cuts(store: MongoStore) -> None:
    sid = _sid()
    kept = await _dead_flush(store, sid)
    assert await store.truncate(sid, at=1) == kept[1:]
    head = await _head(store, sid)
    assert (head["mv"], head["base"], head["n"], head["tail"]) == (0, 1, 1, [])
    chunks = await store.db["steerable_chunks"].find({"_id.s": sid}).to_list(None)
    assert [(c["_id"]["p"], c["e"]) for c in chunks] == [(0, 1)]
    more = [assistant("y" * 40_000, id="m-1"), user("after", id="m-2")]  # the cut ids, again
    await store.save(sid, more, at=1)
    assert await store.messages(sid) == kept[:1] + more
    assert (await _head(store, sid))["base"] == 3


async def test_a_cut_calls_off_a_flush_that_will_not_finish(store: MongoStore) -> None:
    """A flush the cut cannot finish (here: a store whose flush does nothing) is called off:
    the marked entries and what the flush wrote go, and the next flush moves what is there."""

    class Stuck(MongoStore):
        async def _flush(self, session: str, marked: int) -> None:
            pass

    sid = _sid()
    kept = await _dead_flush(store, sid)
    assert await Stuck(store.db).truncate(sid, at=1) == kept[1:]
    head = await _head(store, sid)
    assert (head["mv"], head["base"], head["n"]) == (0, 0, 1)
    assert (await _documents(store, sid))["id lists"] == 0
    more = [assistant("y" * 40_000, id="m-1"), user("after", id="m-2")]
    await store.save(sid, more, at=1)
    assert await store.messages(sid) == kept[:1] + more
    assert (await _head(store, sid))["base"] == 3


async def test_a_flush_replaces_what_a_stalled_flusher_wrote_past_a_cut(store: MongoStore) -> None:
    """A flusher stalled across a cut writes its chunk and id list at a position the cut
    emptied; the next flush there (same end, other messages) replaces both, not adopts them."""
    sid = _sid()
    first = user("f" * 40_000, id="first")
    await store.save(sid, [first], at=0)  # flushed: a chunk [0, 1)
    stale = [user("o" * 20_000, id=f"old-{i}") for i in range(2)]
    entries = layout.stage(sid, [(m.id, codec.encode(m)) for m in stale]).entries
    await store.db["steerable_chunks"].insert_one(layout.chunk(sid, 1, entries))
    await store.db["steerable_sessions"].insert_one(layout.id_list(sid, 1, entries))
    new = [assistant("n" * 20_000, id="new-0"), user("m" * 20_000, id="new-1")]
    await store.save(sid, new, at=1)  # flushed at 1, ending at 3 as the stale chunk does
    assert (await _head(store, sid))["base"] == 3
    assert await store.messages(sid) == [first, *new]
    await store.save(sid, [user("an id of the stale chunk", id="old-0")], at=3)
    assert [m.id for m in await store.messages(sid)] == ["first", "new-0", "new-1", "old-0"]


async def test_a_stalled_flusher_overwrites_nothing(store: MongoStore) -> None:
    """A flusher whose mark is gone (committed by another, then cut and written again) finds
    a different chunk at its position and leaves it, and the id list too."""
    sid = _sid()
    first = [user("f" * 40_000, id="first")]
    await store.save(sid, first, at=0)  # the chunk [0, 1), committed
    stale = layout.stage(sid, [("stale", codec.encode(user("s", id="stale")))]).entries
    for collection, doc in (
        (store.db["steerable_chunks"], layout.chunk(sid, 0, stale)),
        (store.db["steerable_sessions"], layout.id_list(sid, 0, stale)),
    ):
        assert await store._placed(collection, doc, sid, 0, stale) is False
    assert await store.messages(sid) == first
    ids = await store.db["steerable_sessions"].find_one({"_id": {"s": sid, "p": 0}})
    assert ids is not None and ids["k"] == ["first"]


# -- deletes ------------------------------------------------------------------------------


async def test_a_delete_leaves_only_the_service_document(store: MongoStore) -> None:
    sid = _sid()
    await _session(store, sid)
    service = await store.db["steerable_service"].find_one({"_id": sid})
    assert service is not None
    assert await store.delete(sid) is True
    counts = await _documents(store, sid)
    assert counts == dict.fromkeys(counts, 0) | {"service": 1}
    after = await store.db["steerable_service"].find_one({"_id": sid})
    assert after is not None and (after["ep"], after["ev"]) == (service["ep"], service["ev"])
    assert await store.sessions(prefix=sid, after=None, limit=10) == []


async def test_nothing_is_left_of_a_session_the_service_never_saw(store: MongoStore) -> None:
    sid = _sid()
    assert await store.truncate(sid, at=0, length=0) == []
    assert await store.delete(sid) is False
    counts = await _documents(store, sid)
    assert counts == dict.fromkeys(counts, 0)
    await store.save(sid, [user("only a transcript")], at=0)
    assert [m.text for m in await store.truncate(sid, at=0, length=1)] == ["only a transcript"]
    assert (await _documents(store, sid))["service"] == 0  # locked, and not left behind
    assert await store.delete(sid) is False
    assert await _documents(store, sid) == dict.fromkeys(counts, 0)


async def test_a_session_cut_to_nothing_had_something_if_it_saw_a_steer(store: MongoStore) -> None:
    """As the memory store: the ids of taken steers a cut removed are something to forget."""
    sid = _sid()
    await store.steer(sid, Steer("taken", "s"))
    await store.take_steers(sid, at=0, limit=1)
    await store.truncate(sid, at=0)
    assert await store.delete(sid) is True
    await store.steer(sid, Steer("new again", "s"))
    assert [s.text for s in await store.steers(sid)] == ["new again"]


async def test_a_claim_waits_for_a_cut_under_way(store: MongoStore) -> None:
    """The cut writes the service document first, so a claim in the middle of the cut
    conflicts and runs again after it: its turn starts where the cut left the transcript."""
    sid = _sid()
    await store.save(sid, [user(f"{i}") for i in range(5)], at=0)
    await store.enqueue(sid, Input("send", "go", "t"))
    gate, inside = asyncio.Event(), asyncio.Event()

    class Paused(MongoStore):
        async def _cut(
            self,
            s: AsyncClientSession,
            *,
            session: str,
            at: int,
            length: int | None,
            call_off: bool,
        ) -> list[Message]:
            inside.set()
            await gate.wait()
            return await super()._cut(s, session=session, at=at, length=length, call_off=call_off)

    cut = asyncio.create_task(Paused(store.db).truncate(sid, at=2))
    await inside.wait()
    claim = asyncio.create_task(store.claim("a", seconds=60, cap=16, session=sid))
    await asyncio.wait([claim], timeout=1)  # long enough for a claim that does not wait
    gate.set()
    assert len(await cut) == 3
    claimed = await claim
    assert claimed is not None and claimed.start == 2 == len(claimed.messages)


# -- SIGKILL at every command -------------------------------------------------------------


async def _cut(store: MongoStore, sid: str) -> None:
    await store.truncate(sid, at=3, length=9)


async def _delete(store: MongoStore, sid: str) -> None:
    await store.delete(sid)


async def _fork(store: MongoStore, sid: str) -> None:
    await store.fork(sid, f"{sid}-fork")


SWAPPED = [user("swapped in", id="swap"), assistant("Z" * 100_000, id="swap-blob")]


async def _replace(store: MongoStore, sid: str) -> None:
    """The tail from 3 (into the first chunk, past a blob and a taken steer) for two new
    messages (one a blob) and two of the removed ones again."""
    old = [m.id for m in (await store.messages(sid))[3:]]
    again = list((await store.messages(sid))[3:5])
    await store.replace(sid, at=3, old=old, messages=[*SWAPPED, *again])


VERBS: dict[str, Callable[[MongoStore, str], Coroutine[Any, Any, None]]] = {
    "truncate": _cut,
    "delete": _delete,
    "fork": _fork,
    "replace": _replace,
}


class _Recorder(monitoring.CommandListener):
    def __init__(self) -> None:
        self.names: list[str] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.names.append(event.command_name)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def _run_and_die(uri: str, database: str, verb: str, sid: str, event: str, index: int) -> None:
    """In a child process: ``verb`` on ``sid``, SIGKILLing this process at one command."""

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

    async def run() -> None:
        client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(uri, event_listeners=[Killer()])
        await VERBS[verb](MongoStore(client[database]), sid)
        await client.close()

    asyncio.run(run())


@asynccontextmanager
async def _recording() -> AsyncIterator[tuple[MongoStore, _Recorder]]:
    recorder = _Recorder()
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        os.environ[URI_VARIABLE], event_listeners=[recorder]
    )
    try:
        yield MongoStore(client[DATABASE]), recorder
    finally:
        await client.close()


@pytest.mark.parametrize("verb", list(VERBS))
async def test_a_kill_at_any_command_leaves_the_session_whole(store: MongoStore, verb: str) -> None:
    """Killed before the commit: as it was (once the server ends the dead transaction);
    after: cut or deleted whole. Either way the session works on."""
    async with _recording() as (fresh, recorder):
        await VERBS[verb](fresh, (await _sample(store)))
    names = recorder.names
    commit = names.index("commitTransaction")
    # every command up to the commit (the client's endSessions at its close comes after)
    points = [("started", i) for i in range(commit + 1)] + [("succeeded", commit)]
    sids = {point: _sid() for point in points}
    before = {point: await _session(store, sid) for point, sid in sids.items()}
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])  # the children fork with it imported
    children = {
        point: context.Process(
            target=_run_and_die, args=(os.environ[URI_VARIABLE], DATABASE, verb, sid, *point)
        )
        for point, sid in sids.items()
    }
    for child in children.values():
        child.start()
    loop = asyncio.get_running_loop()
    for child in children.values():
        await loop.run_in_executor(None, child.join, 60)
    # what the server does to a dead client's transaction after 60 s, at once
    await store.db.client.admin.command("killAllSessions", [])
    for point, sid in sids.items():
        assert children[point].exitcode == -signal.SIGKILL, f"{point}: not killed there"
        committed = point == ("succeeded", commit)
        await _check(store, verb, sid, before[point], committed)


async def _sample(store: MongoStore) -> str:
    sid = _sid()
    await _session(store, sid)
    return sid


async def _check(
    store: MongoStore, verb: str, sid: str, before: list[Message], committed: bool
) -> None:
    messages = await store.messages(sid)
    waiting = [s.id for s in await store.steers(sid)]
    if verb == "fork":  # the old session as it was; the new one whole or absent
        assert (messages, waiting) == (before, ["k-2"])
        new = f"{sid}-fork"
        assert await store.messages(new) == (before if committed else [])
        if not committed:
            assert await store.fork(sid, new) == len(before)
        assert [s.id for s in await store.steers(new)] == []
        await store.save(new, [user("the fork goes on")], at=len(before))
        return
    if not committed:
        assert (messages, waiting) == (before, ["k-2"])
        assert await store.input(sid, "p") is not None
        return
    if verb == "replace":  # the steer k-1 was cut out: still seen
        assert (messages, waiting) == ([*before[:3], *SWAPPED, *before[3:5]], ["k-2"])
        await store.steer(sid, Steer("sent again", "k-1"))
        assert [s.id for s in await store.steers(sid)] == ["k-2"]
        await store.save(sid, before[5:7], at=7)
        assert (await store.messages(sid))[7:] == before[5:7]
        return
    if verb == "truncate":
        assert (messages, waiting) == (before[:3], ["k-2"])
        await store.save(sid, before[3:7], at=3)
        assert await store.messages(sid) == before[:7]
        return
    assert (messages, waiting) == ([], [])
    assert await store.input(sid, "p") is None
    assert await store.events(sid, after=0, limit=10) == []
    await store.enqueue(sid, Input("send", "again", "p"))
    claim = await store.claim("b", seconds=60, cap=16, session=sid)
    assert claim is not None and claim.start == 0
