"""The MongoDB store's service tables: leases, inputs, turns and events, in transactions.

The behaviour is the memory reference's (:mod:`steerable.stores._memory_service`); this
module says how MongoDB keeps it.

Documents (collections made by migration step 3)
------------------------------------------------
- ``steerable_service``, one per session, ``_id`` the session: ``ep`` the epoch, ``h`` the
  holder (None), ``x`` the lease's expiry in milliseconds since the Unix epoch on the
  server's clock (0 when nobody holds it), ``run`` the running turn (None), ``sr`` whether
  its stop was asked, counters ``seq`` (inputs), ``ev`` (events), ``tn`` (turns claimed),
  ``q`` (inputs waiting to be turns), ``w`` (work: a running turn or ``q`` > 0), ``now`` (the
  server's clock at the last write), ``rw`` (cuts and deletes: :mod:`._rewrite`). The index
  ``(w, x)`` lets a claim that names no session look at sessions with work and no live lease.
- ``steerable_inputs``, ``_id {s, i}`` (so one id is one input, however many replicas race
  to write it): ``n`` seq, ``kd`` kind, ``tx`` the text as JSON text (NUL and any unicode
  round-trip), ``of``/``ah`` the first answer, ``st`` state, ``t`` turn, ``sp`` step.
- ``steerable_turns``, ``_id {s, i}``: ``o`` claim order, ``start``, ``cap``, ``st``,
  ``ep``, ``steps``, ``tk`` steers taken, ``of`` offered, ``stop``, ``end``, ``tx``/``er``
  the outcome's text and error (JSON text).
- ``steerable_events``, ``_id {s, n}``: ``k`` kind, ``t`` turn, ``d`` data (JSON text),
  ``at`` milliseconds on the server's clock, and ``hint`` on the events that make a hint.

Messages go to the core's head document (:mod:`._layout`), with the core's encoding and its
append pipeline, so :meth:`MongoStore.messages` returns what :meth:`step` wrote.

Atomicity: a multi-document transaction per write
-------------------------------------------------
Every write verb (enqueue, claim, step, end_turn, stop) is one transaction, and every one
writes the session's service document, fenced in its filter (epoch, holder, a running turn)
where a lease is carried. Two writes of one session therefore conflict on that document:
MongoDB (and SecantusDB, the server the tests run) aborts one with a ``WriteConflict`` and
the store runs it again, on a fresh snapshot, where its filter sees the winner's write (a
bounded number of times; not ``with_transaction``, which would also retry a lost
connection for two minutes). So exactly one of many claimers wins, a stale holder is
refused with nothing written (:class:`~steerable.errors.Fenced`), and a step's messages,
taken steers, turn counters and events commit together or not at all.
``renew`` alone touches one document and is one ``findAndModify``. Transactions need a
replica set or a sharded cluster (a one-node replica set will do): the service cannot run on
a standalone ``mongod``, though the core :class:`steerable.Store` verbs still do. The
collections are made by the migration: a transaction may not create one before 4.4.

A step is one transaction of a handful of commands (the fenced service document, the turn,
the head's count and tail ids, the offered steers, the head's append, the input, turn and
service updates, the events), none of which reads the transcript: its cost does not grow
with it. After the commit a big tail is flushed to a chunk by the core's crash-safe flush.

The clock
---------
Leases use the server's clock: ``$$NOW`` in a pipeline update, as ``{$toLong: "$$NOW"}``
(milliseconds). SecantusDB evaluates ``$$NOW`` but does not compare dates in ``$expr``;
integers compare on both, so expiries are stored as integers. A claim's filter compares
``x`` with ``$toLong: $$NOW`` inside the ``findAndModify`` itself; a claim that names no
session first narrows its candidates with the index, against the server's ``localTime``
(``hello``), then claims each with that exact check. ``expires_at`` and the events' ``at``
are those milliseconds / 1000.

Hints: change streams
---------------------
:meth:`hints` watches ``steerable_events`` for inserts that carry ``hint``: an input
enqueued while no turn runs and a turn's end with a next input (``work``), the first stop of
a turn (``stop``). They are inserted in the write's transaction, so a hint is delivered on
commit and never for a write that was rolled back. A repeated ``stop`` writes nothing and
so hints nothing (the holder was told by the first, or learns from ``renew``). Change streams
need a replica set too; each ``hints()`` context holds one stream (a cursor the driver
reads on its pool) until it is left.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from datetime import UTC
from typing import TYPE_CHECKING, Any, TypeVar

from pymongo import ReturnDocument
from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.cursor import AsyncCursor
from pymongo.errors import ConnectionFailure, DuplicateKeyError, PyMongoError

from steerable import codec
from steerable.errors import Fenced, InvalidMessage, StoreError, TranscriptConflict
from steerable.messages import Message
from steerable.service_store import (
    Accepted,
    Claim,
    Entry,
    Hint,
    Input,
    InputView,
    Lease,
    Outcome,
    Renewal,
    ServiceEvent,
    SessionState,
    SessionSummary,
    Status,
    TurnView,
    counts_as_step,
    listing,
    message_event,
    turn_of,
)
from steerable.stores.mongodb import _layout as layout
from steerable.stores.mongodb._errors import reaching
from steerable.stores.mongodb._layout import Staged

if TYPE_CHECKING:
    from pymongo.asynchronous.database import AsyncDatabase

_T = TypeVar("_T")
Doc = dict[str, Any]
_NOW: Any = {"$toLong": "$$NOW"}  # the server's clock, in milliseconds
_RETRIES = 5
_CONFLICT_RETRIES = 100  # each round, one of the conflicting writers commits
_SCAN = 16  # candidates a claim that names no session tries
_NEW_SESSION: Doc = {
    "ep": 0,
    "h": None,
    "x": 0,
    "run": None,
    "sr": False,
    "seq": 0,
    "ev": 0,
    "tn": 0,
    "q": 0,
    "w": False,
    "now": 0,
}

# A listing's filter on the state, on the service document's fields
_STATE_FILTER: dict[SessionState | None, Doc] = {
    None: {},
    "running": {"run": {"$ne": None}},
    "queued": {"run": None, "q": {"$gt": 0}},
    "idle": {"run": None, "q": 0},
}


def listing_filter(prefix: str, after: str | None, state: SessionState | None) -> Doc:
    """The filter of a listing: a range of ``_id`` (the index every collection has; strings
    compare by their UTF-8 bytes, so in code-point order), the sessions that had an input,
    and the state, so the limit counts matching sessions only."""
    lower, included, upper = listing(prefix, after)
    ids: Doc = {"$gte" if included else "$gt": lower}
    if upper is not None:
        ids["$lt"] = upper
    return {"_id": ids, "seq": {"$gt": 0}} | _STATE_FILTER[state]


def listing_cursor(service: AsyncCollection[Any], query: Doc, limit: int) -> AsyncCursor[Any]:
    """The find of a listing, on the ``_id`` index by hint: a planner may prefer reading
    the collection and sorting it (SecantusDB does), which reads every session."""
    found = service.find(query, {"run": 1, "q": 1, "now": 1}).hint([("_id", 1)])
    return found.sort("_id", 1).limit(limit)


def _conflict(exc: BaseException) -> bool:
    """Whether ``exc`` is a write conflict (run the transaction again), not an outage."""
    return (
        isinstance(exc, PyMongoError)
        and not isinstance(exc, ConnectionFailure)
        and exc.has_error_label("TransientTransactionError")
    )


class _Raced(Exception):
    """Another writer inserted the same document first; the transaction is run again."""


class _Missing(Exception):
    """The session has no service document yet; it is created and the write run again."""


def _key(session: str, name: str) -> Doc:
    return {"s": session, "i": name}


class _Events:
    """The events one write appends, numbered after the session's counter."""

    def __init__(self, session: str, service: Doc) -> None:
        self.session, self.next, self.at = session, int(service["ev"]) + 1, int(service["now"])
        self.docs: list[Doc] = []

    def add(self, kind: str, turn: str | None, data: Doc, hint: str | None = None) -> None:
        doc: Doc = {"_id": {"s": self.session, "n": self.next}, "s": self.session}
        doc |= {"n": self.next, "k": kind, "t": turn, "d": json.dumps(data), "at": self.at}
        if hint is not None:
            doc["hint"] = hint
        self.docs.append(doc)
        self.next += 1

    async def write(self, events: AsyncCollection[Any], s: AsyncClientSession) -> None:
        if self.docs:
            await events.insert_many(self.docs, session=s)


def _input_of(doc: Doc) -> Input:
    return Input(doc["kd"], json.loads(doc["tx"]), doc["i"])


def _input_view(doc: Doc) -> InputView:
    text = json.loads(doc["tx"])
    return InputView(doc["i"], doc["kd"], text, int(doc["n"]), doc["st"], doc["t"], doc["sp"])


def _turn_view(service: Doc | None, doc: Doc) -> TurnView:
    live = service is not None and service["run"] == doc["i"]
    holder = service["h"] if live and service else None
    return TurnView(
        doc["i"],
        doc["st"],
        holder=holder,
        epoch=int(doc["ep"]),
        lease_expires_at=int(service["x"]) / 1000 if service and holder else None,
        steps=int(doc["steps"]),
        steers_taken=int(doc["tk"]),
        stop_requested=bool(doc["stop"]),
        start=int(doc["start"]),
        end=doc["end"],
        text=json.loads(doc["tx"]),
        error=json.loads(doc["er"]) if doc["er"] is not None else None,
    )


def _step_events(
    events: _Events,
    turn: str,
    position: int,
    messages: Sequence[Message],
    offered: list[Doc],
    taken: list[Message],
    step: int,
) -> _Events:
    """A step's events but its ``step``: the messages, the steers taken and their messages."""
    for message in messages:
        events.add("message", turn, message_event(message, position))
        position += 1
    if offered:
        events.add("steers_taken", turn, {"ids": [row["i"] for row in offered], "step": step})
    for message in taken:
        events.add("message", turn, message_event(message, position))
        position += 1
    return events


class MongoServiceTables:
    """The :class:`steerable.service_store.ServiceStore` verbs of :class:`MongoStore`."""

    if TYPE_CHECKING:  # provided by MongoStore
        db: AsyncDatabase[Any]
        _heads: AsyncCollection[Any]
        _chunks: AsyncCollection[Any]

        async def _check_migrated(self) -> None: ...
        async def _bodies(self, entries: list[layout.Entry]) -> list[str]: ...
        async def _flush(self, session: str, marked: int) -> None: ...
        async def _write_blobs(self, staged: Staged) -> None: ...
        async def _drop_blobs(self, staged: Staged) -> None: ...
        async def messages(self, session: str) -> list[Message]: ...

    @property
    def _service(self) -> AsyncCollection[Any]:
        return self.db[layout.SERVICE]

    @property
    def _inputs(self) -> AsyncCollection[Any]:
        return self.db[layout.INPUTS]

    @property
    def _turns(self) -> AsyncCollection[Any]:
        return self.db[layout.TURNS]

    @property
    def _events(self) -> AsyncCollection[Any]:
        return self.db[layout.EVENTS]

    async def _transaction(self, body: Callable[[AsyncClientSession], Awaitable[_T]]) -> _T:
        """Run ``body`` in one transaction, again (on a fresh snapshot) after a conflict.

        Not ``with_transaction``: it retries every ``TransientTransactionError`` for two
        minutes, a lost connection included, where a store must say at once that the
        database cannot be reached. Only a conflict with another writer is run again.
        """
        await self._check_migrated()
        async with self.db.client.start_session() as s:
            for attempt in range(_CONFLICT_RETRIES):
                await s.start_transaction()
                try:
                    result = await body(s)
                    await s.commit_transaction()
                except BaseException as exc:
                    if s.in_transaction:
                        await s.abort_transaction()
                    if not _conflict(exc):
                        raise
                    await asyncio.sleep(random.uniform(0, 0.002 * (attempt + 1)))
                    continue
                return result
        raise StoreError(f"a transaction conflicted {_CONFLICT_RETRIES} times in a row")

    async def _lock(self, s: AsyncClientSession, query: Doc, *sets: Doc) -> Doc | None:
        """Write the session's service document if it matches ``query``: the write's lock.

        ``now`` takes the server's clock first, for the pipeline stages after it and for the
        events. A concurrent write of the same session conflicts here.
        """
        doc: Doc | None = await self._service.find_one_and_update(
            query,
            [{"$set": {"now": _NOW}}, *({"$set": part} for part in sets)],
            return_document=ReturnDocument.AFTER,
            session=s,
        )
        return doc

    async def _fence(self, s: AsyncClientSession, lease: Lease, *sets: Doc) -> Doc:
        """The service document, locked, if ``lease`` still holds it; Fenced otherwise."""
        query = {"_id": lease.session, "ep": lease.epoch, "h": lease.holder}
        doc = await self._lock(s, query | {"run": {"$ne": None}}, *sets)
        if doc is None:
            current = await self._service.find_one({"_id": lease.session}, {"ep": 1}, session=s)
            raise Fenced(lease.session, lease.epoch, int(current["ep"]) if current else None)
        return doc

    async def _first_queued(self, session: str, s: AsyncClientSession | None) -> Doc | None:
        found: Doc | None = await self._inputs.find_one(
            {"s": session, "st": "waiting", "t": None}, sort=[("n", 1)], session=s
        )
        return found

    async def _length(self, session: str, s: AsyncClientSession) -> int:
        head = await self._heads.find_one({"_id": session}, {"n": 1}, session=s)
        return int(head["n"]) if head else 0

    # -- hints -----------------------------------------------------------------------------

    @asynccontextmanager
    async def hints(self) -> AsyncIterator[AsyncIterator[Hint]]:
        """Hints of work and stops from every replica: a change stream on the events."""
        watched = [{"$match": {"operationType": "insert", "fullDocument.hint": {"$exists": True}}}]
        with reaching("watch the steerable events"):
            stream = await self._events.watch(watched)

        async def iterate() -> AsyncIterator[Hint]:
            while True:
                with reaching("watch the steerable events"):
                    try:
                        change = await stream.next()
                    except StopAsyncIteration:  # the stream was invalidated (a drop)
                        return
                doc = change["fullDocument"]
                yield Hint(doc["hint"], doc["s"])

        try:
            yield iterate()
        finally:
            with reaching("stop watching the steerable events"):
                await stream.close()

    # -- inputs ----------------------------------------------------------------------------

    async def enqueue(self, session: str, input: Input) -> Accepted:
        """Record ``input`` in the session's order of arrival; an id seen before is a no-op."""
        with reaching(f"enqueue an input of session {session!r}"):
            for _ in range(_RETRIES):
                try:
                    return await self._transaction(lambda s: self._enqueue(s, session, input))
                except _Missing:
                    new = {"$setOnInsert": _NEW_SESSION}
                    with suppress(DuplicateKeyError):  # made by a racing writer meanwhile
                        await self._service.update_one({"_id": session}, new, upsert=True)
                except _Raced:
                    pass  # the same id inserted by a racing writer: its answer is read next
        raise StoreError(f"session {session!r}: an enqueue kept racing")

    async def _enqueue(self, s: AsyncClientSession, session: str, input: Input) -> Accepted:
        seen = await self._inputs.find_one({"_id": _key(session, input.id)}, session=s)
        if seen is not None:
            return Accepted(seen["i"], seen["kd"], int(seen["n"]), seen["of"], seen["ah"], True)
        service = await self._lock(s, {"_id": session})
        if service is None:
            raise _Missing
        running = None
        if service["run"] is not None:
            running = await self._turns.find_one({"_id": _key(session, service["run"])}, session=s)
        offered: str | None = None
        if (
            input.kind == "steer"
            and running is not None
            and not running["stop"]
            and running["of"] < running["cap"]
        ):
            offered = running["i"]
            await self._turns.update_one({"_id": running["_id"]}, {"$inc": {"of": 1}}, session=s)
        ahead = 0 if offered else (running is not None) + int(service["q"])
        seq = int(service["seq"]) + 1
        doc = {"_id": _key(session, input.id), "s": session, "i": input.id, "n": seq}
        doc |= {"kd": input.kind, "tx": json.dumps(input.text), "of": offered, "ah": ahead}
        doc |= {"st": "waiting", "t": offered, "sp": None}
        try:
            await self._inputs.insert_one(doc, session=s)
        except DuplicateKeyError:
            raise _Raced from None
        events = _Events(session, service)
        hint = "work" if running is None else None
        events.add("input", offered, {"id": input.id, "kind": input.kind, "turn": offered}, hint)
        change: Doc = {"$inc": {"seq": 1, "ev": 1, "q": 0 if offered else 1}}
        if not offered:
            change["$set"] = {"w": True}
        await self._service.update_one({"_id": session}, change, session=s)
        await events.write(self._events, s)
        return Accepted(input.id, input.kind, seq, offered, ahead)

    # -- claims and leases -----------------------------------------------------------------

    async def claim(
        self, holder: str, *, seconds: float, cap: int, session: str | None = None
    ) -> Claim | None:
        """Claim one session with work and no live lease (``session`` only, if given)."""
        with reaching("claim a session"):
            if session is not None:
                return await self._claim(session, holder, seconds, cap)
            hello = await self.db.client.admin.command("hello")
            now = int(hello["localTime"].replace(tzinfo=UTC).timestamp() * 1000)
            candidates = self._service.find({"w": True, "x": {"$lte": now}}, {"_id": 1})
            for doc in await candidates.sort("x", 1).limit(_SCAN).to_list(None):
                claim = await self._claim(doc["_id"], holder, seconds, cap)
                if claim is not None:
                    return claim
            return None

    async def _claim(self, session: str, holder: str, seconds: float, cap: int) -> Claim | None:
        found = await self._transaction(lambda s: self._claim_in(s, session, holder, seconds, cap))
        if found is None:
            return None
        lease, turn, prompt, start, resumed, steps, taken, cap, stop = found
        messages = await self.messages(session)
        return Claim(lease, turn, prompt, start, messages, resumed, steps, taken, cap, stop)

    async def _claim_in(
        self, s: AsyncClientSession, session: str, holder: str, seconds: float, cap: int
    ) -> tuple[Lease, str, Input, int, bool, int, int, int, bool] | None:
        free = {"$expr": {"$lte": ["$x", _NOW]}}
        claimed = {"ep": {"$add": ["$ep", 1]}, "h": {"$literal": holder}}
        claimed["x"] = {"$add": ["$now", round(seconds * 1000)]}
        service = await self._lock(s, {"_id": session, "w": True} | free, claimed)
        if service is None:
            return None
        epoch, events = int(service["ep"]), _Events(session, service)
        lease = Lease(session, holder, epoch, int(service["x"]) / 1000)
        resumed = service["run"] is not None
        change: Doc = {"$inc": {"ev": 2 if resumed else 1}}
        if not resumed:
            prompt = await self._first_queued(session, s)
            if prompt is None:
                raise StoreError(f"session {session!r} says it has work but nothing waits")
            name = prompt["i"]
            await self._inputs.update_one(
                {"_id": prompt["_id"]}, {"$set": {"st": "prompt", "t": name}}, session=s
            )
            new: Doc = {"_id": _key(session, name), "s": session, "i": name}
            new |= {"o": service["tn"] + 1, "start": await self._length(session, s), "cap": cap}
            new |= {"st": "running", "ep": epoch, "steps": 0, "tk": 0, "of": 0, "stop": False}
            new |= {"end": None, "tx": json.dumps(""), "er": None}
            await self._turns.insert_one(new, session=s)
            turn = new
            change["$inc"] |= {"tn": 1, "q": -1}
            change["$set"] = {"run": name, "sr": False}
        else:
            name = service["run"]
            found: Doc | None = await self._turns.find_one_and_update(
                {"_id": _key(session, name)},
                {"$set": {"ep": epoch}},
                return_document=ReturnDocument.AFTER,
                session=s,
            )
            prompt = await self._inputs.find_one({"_id": _key(session, name)}, session=s)
            if found is None or prompt is None:
                raise StoreError(f"session {session!r}: the running turn {name!r} is missing")
            turn = found
            events.add("holder", name, {"holder": holder, "epoch": epoch})
        events.add("turn_started", name, {"epoch": epoch, "holder": holder, "resumed": resumed})
        await self._service.update_one({"_id": session}, change, session=s)
        await events.write(self._events, s)
        steps, taken, stop = int(turn["steps"]), int(turn["tk"]), bool(turn["stop"])
        start, cap = int(turn["start"]), int(turn["cap"])
        return lease, name, _input_of(prompt), start, resumed, steps, taken, cap, stop

    async def renew(self, lease: Lease, *, seconds: float) -> Renewal:
        """Extend ``lease`` by ``seconds`` from now; :class:`Fenced` if it is stale."""
        query = {"_id": lease.session, "ep": lease.epoch, "h": lease.holder}
        with reaching(f"renew the lease of session {lease.session!r}"):
            await self._check_migrated()
            doc = await self._service.find_one_and_update(
                query | {"run": {"$ne": None}},
                [{"$set": {"x": {"$add": [_NOW, round(seconds * 1000)]}}}],
                projection={"x": 1, "sr": 1},
                return_document=ReturnDocument.AFTER,
            )
            if doc is None:
                current = await self._service.find_one({"_id": lease.session}, {"ep": 1})
                raise Fenced(lease.session, lease.epoch, int(current["ep"]) if current else None)
        new = Lease(lease.session, lease.holder, lease.epoch, int(doc["x"]) / 1000)
        return Renewal(new, bool(doc["sr"]))

    # -- steps -----------------------------------------------------------------------------

    async def step(
        self, lease: Lease, messages: Sequence[Message], *, at: int, take: int
    ) -> list[Message]:
        """The turn's save-and-take, fenced by ``lease``; returns the steered messages taken."""
        session = lease.session
        staged = layout.stage(session, [(m.id, codec.encode(m)) for m in messages])
        with reaching(f"save a step of session {session!r}"):
            await self._check_migrated()
            await self._write_blobs(staged)
            try:
                taken, head = await self._transaction(
                    lambda s: self._step(s, lease, messages, staged, at, take)
                )
            except (Fenced, TranscriptConflict, InvalidMessage):
                await self._drop_blobs(staged)  # surely not committed
                raise
            if head is not None and (head["tb"] >= layout.FLUSH_BYTES or head.get("mv")):
                await self._flush(session, int(head.get("mv") or 0))
        return taken

    async def _step(
        self,
        s: AsyncClientSession,
        lease: Lease,
        messages: Sequence[Message],
        staged: Staged,
        at: int,
        take: int,
    ) -> tuple[list[Message], Doc | None]:
        session = lease.session
        service = await self._fence(s, lease)
        name = service["run"]
        turn = await self._turns.find_one({"_id": _key(session, name)}, session=s)
        if turn is None:
            raise StoreError(f"session {session!r}: the running turn {name!r} is missing")
        head = await self._heads.find_one({"_id": session}, {"n": 1, "tail.i": 1}, session=s)
        stored = int(head["n"]) if head else 0
        if at != stored:
            raise TranscriptConflict(session, at, stored)
        new_ids = [m.id for m in messages]
        in_tail = {entry["i"] for entry in head.get("tail", ())} if head else set()
        if len(set(new_ids)) != len(new_ids) or not in_tail.isdisjoint(new_ids):
            raise InvalidMessage(f"session {session!r}: a message id is already stored")
        is_step = counts_as_step(messages, take)
        steps = int(turn["steps"]) + is_step
        room = 0 if turn["stop"] else max(0, min(take, int(turn["cap"]) - int(turn["tk"])))
        offered: list[Doc] = []
        if room:
            query = {"s": session, "st": "waiting", "t": name}
            found = self._inputs.find(query, session=s).sort("n", 1).limit(room)
            offered = await found.to_list(None)
        taken = await self._fresh(s, session, offered, in_tail | set(new_ids))
        extra = layout.stage(session, [(m.id, codec.encode(m)) for m in taken])
        if extra.blobs:
            await self._blobs_of(s, extra)
        written = await self._append_entries(
            s, session, staged, extra, [*new_ids, *(m.id for m in taken)], at
        )
        if offered:
            await self._inputs.update_many(
                {"_id": {"$in": [row["_id"] for row in offered]}},
                {"$set": {"st": "taken", "sp": steps}},
                session=s,
            )
        inc = {"steps": int(is_step), "tk": len(offered)}
        await self._turns.update_one({"_id": turn["_id"]}, {"$inc": inc}, session=s)
        events = _step_events(
            _Events(session, service), name, stored, messages, offered, taken, steps
        )
        if is_step:
            events.add("step", name, {"step": steps, "length": stored + len(messages) + len(taken)})
        await self._service.update_one(
            {"_id": session}, {"$inc": {"ev": len(events.docs)}}, session=s
        )
        await events.write(self._events, s)
        return taken, written

    async def _fresh(
        self, s: AsyncClientSession, session: str, offered: list[Doc], known: set[str]
    ) -> list[Message]:
        """The offered steers as steered messages, less those whose id is stored already.

        An id is in the head's tail (``known``, with the step's own) or a chunk's id list.
        """
        ids = [row["i"] for row in offered if row["i"] not in known]
        if ids:
            listed = {"s": session, "k": {"$in": ids}, "_id": {"$ne": session}}
            async for found in self._heads.find(listed, {"k": 1}, session=s):
                known |= set(found["k"])
        return [_input_of(row).message(steered=True) for row in offered if row["i"] not in known]

    async def _blobs_of(self, s: AsyncClientSession, staged: Staged) -> None:
        await self.db[layout.BLOBS].insert_many(staged.blobs, session=s)

    async def _append_entries(
        self,
        s: AsyncClientSession,
        session: str,
        staged: Staged,
        extra: Staged,
        ids: list[str],
        at: int,
    ) -> Doc | None:
        """Append both runs of entries to the head with the core's pipeline; None if none."""
        both = Staged(staged.entries + extra.entries)
        if not both.entries:
            return None
        create = at == 0
        try:
            head: Doc | None = await self._heads.find_one_and_update(
                layout.append_filter(session, ids, at),
                layout.append_pipeline(session, both, ids, 0, create=create),
                projection={"tb": 1, "mv": 1},
                upsert=create,
                return_document=ReturnDocument.AFTER,
                session=s,
            )
        except DuplicateKeyError:  # the unique index: a chunk of the session holds an id
            raise InvalidMessage(
                f"session {session!r}: a message id is already in the transcript"
            ) from None
        if head is None:
            raise TranscriptConflict(session, at, await self._length(session, s))
        return head

    # -- ends and stops --------------------------------------------------------------------

    async def end_turn(self, lease: Lease, outcome: Outcome) -> str | None:
        """Record the turn's end and release the lease; the next turn's prompt id, if any."""
        with reaching(f"end the turn of session {lease.session!r}"):
            return await self._transaction(lambda s: self._end_turn(s, lease, outcome))

    async def _end_turn(self, s: AsyncClientSession, lease: Lease, outcome: Outcome) -> str | None:
        session = lease.session
        service = await self._fence(s, lease)
        name = service["run"]
        ended: Doc = {"st": outcome.state, "tx": json.dumps(outcome.text)}
        ended |= {"er": json.dumps(outcome.error) if outcome.error is not None else None}
        ended["end"] = await self._length(session, s)
        await self._turns.update_one({"_id": _key(session, name)}, {"$set": ended}, session=s)
        freed = await self._inputs.update_many(
            {"s": session, "st": "waiting", "t": name}, {"$set": {"t": None}}, session=s
        )
        queued = int(service["q"]) + freed.modified_count
        following = await self._first_queued(session, s)
        events = _Events(session, service)
        hint = "work" if following is not None else None
        events.add("turn_ended", name, {"state": outcome.state}, hint)
        released = {"run": None, "h": None, "x": 0, "sr": False, "q": queued, "w": queued > 0}
        await self._service.update_one(
            {"_id": session}, {"$set": released, "$inc": {"ev": 1}}, session=s
        )
        await events.write(self._events, s)
        return following["i"] if following is not None else None

    async def stop(self, session: str) -> str | None:
        """Ask the running turn to stop; its id, or None when no turn runs."""
        with reaching(f"stop the turn of session {session!r}"):
            return await self._transaction(lambda s: self._stop(s, session))

    async def _stop(self, s: AsyncClientSession, session: str) -> str | None:
        service = await self._service.find_one({"_id": session}, session=s)
        if service is None or service["run"] is None:
            return None
        name: str = service["run"]
        if service["sr"]:
            return name  # asked already: nothing to write
        service = await self._lock(s, {"_id": session, "run": name, "sr": False}, {"sr": True})
        if service is None:  # stopped by a write this snapshot missed: asked already
            return name
        await self._turns.update_one(
            {"_id": _key(session, name)}, {"$set": {"stop": True}}, session=s
        )
        events = _Events(session, service)
        events.add("stop", name, {}, "stop")
        await self._service.update_one({"_id": session}, {"$inc": {"ev": 1}}, session=s)
        await events.write(self._events, s)
        return name

    # -- views -----------------------------------------------------------------------------

    async def status(self, session: str) -> Status:
        """The session's running turn, waiting inputs and queue length."""
        with reaching(f"read the status of session {session!r}"):
            service = await self._service.find_one({"_id": session})
            if service is None:
                return Status(session, None, [], 0)
            running = None
            if service["run"] is not None:
                doc = await self._turns.find_one({"_id": _key(session, service["run"])})
                running = _turn_view(service, doc) if doc else None
            rows = self._inputs.find({"s": session, "st": "waiting"}).sort("n", 1)
            waiting = [_input_view(row) for row in await rows.to_list(None)]
        return Status(session, running, waiting, sum(1 for w in waiting if w.turn is None))

    async def input(self, session: str, id: str) -> InputView | None:
        """The input ``id`` and its fate, or None if the session never had it."""
        with reaching(f"read an input of session {session!r}"):
            doc = await self._inputs.find_one({"_id": _key(session, id)})
        return _input_view(doc) if doc else None

    async def turn(self, session: str, id: str) -> TurnView | None:
        """The turn ``id`` (``queued`` while its prompt waits), or None if there is none."""
        with reaching(f"read a turn of session {session!r}"):
            doc = await self._turns.find_one({"_id": _key(session, id)})
            if doc is not None:
                return _turn_view(await self._service.find_one({"_id": session}), doc)
            row = await self._inputs.find_one({"_id": _key(session, id)})
        if row is not None and row["st"] == "waiting" and row["t"] is None:
            return TurnView(id, "queued")
        return None

    async def transcript(self, session: str, *, after: int, limit: int) -> list[Entry]:
        """Up to ``limit`` messages at positions > ``after``, with the turn of each."""
        first = max(after + 1, 0)
        if limit <= 0:
            return []
        with reaching(f"read the transcript of session {session!r}"):
            page = await self._page(session, first, first + limit)
            if not page:
                return []
            last = page[-1][0]
            owner = self._turns.find({"s": session, "start": {"$lte": first}}, {"start": 1, "i": 1})
            starts = await owner.sort("o", -1).limit(1).to_list(None)
            later = {"s": session, "start": {"$gt": first, "$lte": last}}
            starts += await self._turns.find(later, {"start": 1, "i": 1}).sort("o", 1).to_list(None)
        pairs = [(int(t["start"]), str(t["i"])) for t in starts]
        return [Entry(position, message, turn_of(position, pairs)) for position, message in page]

    async def _page(self, session: str, first: int, end: int) -> list[tuple[int, Message]]:
        """The messages at positions ``[first, end)``, from the chunks and the head's tail."""
        head = await self._heads.find_one({"_id": session}, {"n": 1, "base": 1, "tail": 1})
        if head is None:
            return []
        base, end = int(head["base"]), min(end, int(head["n"]))
        if first >= end:
            return []
        found: list[tuple[int, layout.Entry]] = []
        if first < base:
            query = layout.chunk_range(session, min(end, base)) | {"e": {"$gt": first}}
            chunks = await self._chunks.find(query).to_list(None)
            for chunk in sorted(chunks, key=lambda c: int(c["_id"]["p"])):
                start = int(chunk["_id"]["p"])
                found += [(start + k, e) for k, e in enumerate(chunk["m"]) if start + k >= first]
        found += [(base + k, e) for k, e in enumerate(head["tail"]) if first <= base + k]
        found = [(p, e) for p, e in found if p < end]
        bodies = await self._bodies([entry for _, entry in found])
        return [
            (p, codec.decode(e["i"], body, where=f"session {session!r}, position {p}"))
            for (p, e), body in zip(found, bodies, strict=True)
        ]

    async def events(self, session: str, *, after: int, limit: int) -> list[ServiceEvent]:
        """Up to ``limit`` durable events with ids > ``after``, in id order."""
        if limit <= 0:
            return []
        with reaching(f"read the events of session {session!r}"):
            found = self._events.find({"s": session, "n": {"$gt": max(after, 0)}})
            docs = await found.sort("n", 1).limit(limit).to_list(None)
        return [
            ServiceEvent(int(d["n"]), d["k"], d["t"], json.loads(d["d"]), int(d["at"]) / 1000)
            for d in docs
        ]

    async def sessions(
        self, *, prefix: str, after: str | None, limit: int, state: SessionState | None = None
    ) -> list[SessionSummary]:
        """Up to ``limit`` sessions whose id starts with ``prefix`` and sorts after ``after``.

        One query on the service documents by ``_id``; ``updated_at`` is their ``now``,
        the server's clock at the write that appended the last event (every write that
        appends one sets it, and only those).
        """
        if limit <= 0:
            return []  # (a limit of 0 is no limit to MongoDB)
        query = listing_filter(prefix, after, state)
        with reaching(f"list the sessions under {prefix!r}"):
            await self._check_migrated()
            docs = await listing_cursor(self._service, query, limit).to_list(None)
        return [
            SessionSummary(
                d["_id"],
                "running" if d["run"] is not None else "queued" if d["q"] else "idle",
                d["run"],
                int(d["q"]),
                int(d["now"]) / 1000,
            )
            for d in docs
        ]
