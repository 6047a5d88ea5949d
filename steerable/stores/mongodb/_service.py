"""The MongoDB store's service tables: leases, turns, steps, ends and stops, and hints.

The behaviour is the memory reference's (:mod:`steerable.stores._memory_service`); these
modules say how MongoDB keeps it: the documents and their fields in :mod:`._documents`,
every write one transaction locked on the session's service document in
:mod:`._transactions`, the queue (``enqueue``, ``cancel``) in :mod:`._queue`, the reads and
the session's metadata in :mod:`._views`, the claims in :mod:`._claims`, and here the
turn's other verbs. Messages go to the
core's head document (:mod:`._layout`), with the core's encoding and its append pipeline
(which stamps each entry with the server's clock), so :meth:`MongoStore.messages` returns
what :meth:`step` wrote.

A step is one transaction of a handful of commands (the fenced service document, the turn,
the head's count and tail ids, the offered steers when the counters say some are, the
head's append, the input, turn and service updates, the events), none of which reads the
transcript: its cost does not grow with it. After the commit a big tail is flushed to a
chunk by the core's crash-safe flush. An end that carries the turn's last save
(``end_turn(last=..., at=...)``) is one transaction of a final step's commands and then the
end's, less the end's fence (the step's lock holds) and its read of the length (the save
says it): three commands fewer than the step and the end apart, one commit among them.
``renew`` alone touches one document and is one ``findAndModify``; ``stopping`` is one
query on the index ``(h, sr)``.

``end_turn`` frees the steers offered to the turn and never taken, and lists them in its
``turn_ended`` event.

The clock
---------
Leases use the server's clock: ``$$NOW`` in a pipeline update, as ``{$toLong: "$$NOW"}``
(milliseconds). SecantusDB evaluates ``$$NOW`` but does not compare dates in ``$expr``;
integers compare on both, so expiries and times are stored as integers. A claim's filter
compares ``x`` with ``$toLong: $$NOW`` inside the ``findAndModify`` itself; a claim that
names no session first narrows its candidates with the index, against the server's
``localTime`` (``hello``), then claims each with that exact check. ``expires_at``, the
events' ``at`` and every other time are those milliseconds / 1000; a write's times are its
lock's ``now``.

Hints: change streams
---------------------
:meth:`hints` watches ``steerable_events`` for inserts that carry ``hint``: an input
enqueued while no turn runs and a turn's end with a next input (``work``), the first stop of
a turn (``stop``). They are inserted in the write's transaction, so a hint is delivered on
commit and never for a write that was rolled back. A repeated ``stop`` writes nothing and
so hints nothing (the holder was told by the first, or learns from ``renew`` and
``stopping``). Change streams need a replica set too; each ``hints()`` context holds one
stream (a cursor the driver reads on its pool) until it is left.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from pymongo import ReturnDocument
from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.cursor import AsyncCursor
from pymongo.errors import DuplicateKeyError

from steerable import codec
from steerable.errors import Fenced, InvalidMessage, StoreError, TranscriptConflict, UsageError
from steerable.messages import Message
from steerable.service_store import (
    Hint,
    Lease,
    Outcome,
    Renewal,
    counts_as_step,
    message_event,
)
from steerable.stores.mongodb import _layout as layout
from steerable.stores.mongodb._claims import MongoClaims
from steerable.stores.mongodb._documents import NOW, Doc, input_of, key
from steerable.stores.mongodb._errors import reaching
from steerable.stores.mongodb._layout import Staged
from steerable.stores.mongodb._queue import MongoQueue
from steerable.stores.mongodb._transactions import Events
from steerable.stores.mongodb._views import MongoServiceViews

_T = TypeVar("_T")
_IDS: Doc = {"i": 1}


def stops_cursor(service: AsyncCollection[Any], holder: str) -> AsyncCursor[Any]:
    """The find of the stop poll: the sessions of ``holder`` whose stop was asked, on the
    ``(h, sr)`` index by hint (SecantusDB's planner reads the whole collection for a filter
    of one more field, ``run``, which is why there is none: a holder holds running turns)."""
    found = service.find({"h": holder, "sr": True}, {"_id": 1}).hint([("h", 1), ("sr", 1)])
    return found.sort("_id", 1)


def _step_events(
    events: Events,
    turn: str,
    position: int,
    messages: Sequence[Message],
    offered: list[Doc],
    taken: list[Message],
    step: int,
) -> Events:
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


class MongoServiceTables(MongoClaims, MongoQueue, MongoServiceViews):
    """The :class:`steerable.service_store.ServiceStore` verbs of :class:`MongoStore`."""

    if TYPE_CHECKING:  # provided by MongoStore

        async def _flush(self, session: str, marked: int) -> None: ...
        async def _write_blobs(self, staged: Staged) -> None: ...
        async def _drop_blobs(self, staged: Staged) -> None: ...

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

    # -- leases ----------------------------------------------------------------------------

    async def renew(self, lease: Lease, *, seconds: float) -> Renewal:
        """Extend ``lease`` by ``seconds`` from now; :class:`Fenced` if it is stale."""
        query = {"_id": lease.session, "ep": lease.epoch, "h": lease.holder}
        with reaching(f"renew the lease of session {lease.session!r}"):
            await self._check_migrated()
            doc = await self._service.find_one_and_update(
                query | {"run": {"$ne": None}},
                [{"$set": {"x": {"$add": [NOW, round(seconds * 1000)]}}}],
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
        self,
        lease: Lease,
        messages: Sequence[Message],
        *,
        at: int,
        take: int,
        final: bool = False,
    ) -> list[Message]:
        """The turn's save-and-take, fenced by ``lease``; returns the steered messages taken."""
        session = lease.session
        staged = layout.stage(session, [(m.id, codec.encode(m)) for m in messages])
        with reaching(f"save a step of session {session!r}"):
            return await self._saving(
                session, staged, lambda s: self._taken(s, lease, messages, staged, at, take, final)
            )

    async def _taken(
        self,
        s: AsyncClientSession,
        lease: Lease,
        messages: Sequence[Message],
        staged: Staged,
        at: int,
        take: int,
        final: bool,
    ) -> tuple[list[Message], Doc | None]:
        """A step's work as ``step`` commits it: the steers taken, and the head if written."""
        taken, head, _ = await self._step(s, lease, messages, staged, at, take, final)
        return taken, head

    async def _saving(
        self,
        session: str,
        staged: Staged,
        body: Callable[[AsyncClientSession], Awaitable[tuple[_T, Doc | None]]],
    ) -> _T:
        """``body``'s transaction, which appends ``staged`` to the head: its blobs written
        before (dropped again if it is refused), the head flushed after it if it grew big."""
        await self._check_migrated()
        await self._write_blobs(staged)
        try:
            result, head = await self._transaction(body)
        except (Fenced, TranscriptConflict, InvalidMessage):
            await self._drop_blobs(staged)  # surely not committed
            raise
        if head is not None and (head["tb"] >= layout.FLUSH_BYTES or head.get("mv")):
            await self._flush(session, int(head.get("mv") or 0))
        return result

    async def _step(
        self,
        s: AsyncClientSession,
        lease: Lease,
        messages: Sequence[Message],
        staged: Staged,
        at: int,
        take: int,
        final: bool,
    ) -> tuple[list[Message], Doc | None, Doc]:
        """The step, in ``s``: the steers taken, the head if written, and the service
        document as the step left it (locked: the end of the same transaction goes on)."""
        session = lease.session
        service = await self._fence(s, lease)
        name = service["run"]
        turn = await self._turns.find_one({"_id": key(session, name)}, session=s)
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
        events = Events(session, service)
        taken, written, done = await self._stepped(
            s, service, turn, at, in_tail, messages, staged, take, final, events
        )
        await self._turns.update_one({"_id": turn["_id"]}, {"$inc": done}, session=s)
        counts = {"ev": len(events.docs), "wt": -done["tk"]}
        await self._service.update_one({"_id": session}, {"$inc": counts}, session=s)
        await events.write(self._events, s)
        after = service | {name: int(service[name]) + n for name, n in counts.items()}
        return taken, written, after

    async def _stepped(
        self,
        s: AsyncClientSession,
        service: Doc,
        turn: Doc,
        at: int,
        in_tail: set[str],
        messages: Sequence[Message],
        staged: Staged,
        take: int,
        final: bool,
        events: Events,
    ) -> tuple[list[Message], Doc | None, dict[str, int]]:
        """A step's work once its caller locked the service document, read ``turn`` and
        checked ``messages`` against the tail (``in_tail``, its ids; ``at``, its length):
        the steers taken, the append, the taken inputs, the events (added to ``events``).

        Returns the steers taken, the head if written, and what the turn's ``steps`` and
        ``tk`` grow by (the caller writes them, the service's counters and the events):
        :meth:`_step`'s and a claim's first step's (:meth:`_first_step`) one code.
        """
        session, name = service["_id"], turn["i"]
        new_ids = [m.id for m in messages]
        is_step = counts_as_step(messages, take, final=final)
        steps = int(turn["steps"]) + is_step
        room = 0 if turn["stop"] else max(0, min(take, int(turn["cap"]) - int(turn["tk"])))
        offered = await self._offered(s, service, name, room) if room else []
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
        _step_events(events, name, at, messages, offered, taken, steps)
        if is_step:
            events.add("step", name, {"step": steps, "length": at + len(messages) + len(taken)})
        return taken, written, {"steps": int(is_step), "tk": len(offered)}

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
        return [input_of(row).message(steered=True) for row in offered if row["i"] not in known]

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

    async def end_turn(
        self,
        lease: Lease,
        outcome: Outcome,
        *,
        last: Sequence[Message] = (),
        at: int | None = None,
    ) -> str | None:
        """Record the turn's end and release the lease; the next turn's prompt id, if any.

        ``last`` (saved at ``at`` first): the final step's work and the end's in one
        transaction, committed or refused together.
        """
        session = lease.session
        with reaching(f"end the turn of session {session!r}"):
            if not last:
                return await self._transaction(lambda s: self._end_turn(s, lease, outcome))
            if at is None:
                raise UsageError("end_turn(last=...) needs at=, the length the messages follow")
            staged = layout.stage(session, [(m.id, codec.encode(m)) for m in last])

            async def both(s: AsyncClientSession) -> tuple[str | None, Doc | None]:
                _, head, service = await self._step(s, lease, last, staged, at, 0, True)
                end = at + len(last)
                return await self._end_turn(s, lease, outcome, service, end), head

            return await self._saving(session, staged, both)

    async def _end_turn(
        self,
        s: AsyncClientSession,
        lease: Lease,
        outcome: Outcome,
        service: Doc | None = None,
        end: int | None = None,
    ) -> str | None:
        """The end, in ``s``; after a step of the same transaction, given the service
        document it locked and left and the transcript's length after it."""
        session = lease.session
        service = await self._fence(s, lease) if service is None else service
        name = service["run"]
        ended: Doc = {"st": outcome.state, "tx": json.dumps(outcome.text)}
        ended |= {"er": json.dumps(outcome.error) if outcome.error is not None else None}
        ended |= {"us": json.dumps(outcome.usage), "ea": service["now"]}
        ended["end"] = await self._length(session, s) if end is None else end
        await self._turns.update_one({"_id": key(session, name)}, {"$set": ended}, session=s)
        freed = [row["i"] for row in await self._offered(s, service, name, fields=_IDS)]
        if freed:  # each a turn of its own, in its place
            keys = [key(session, i) for i in freed]
            await self._inputs.update_many({"_id": {"$in": keys}}, {"$set": {"t": None}}, session=s)
        queued = int(service["q"]) + len(freed)
        following = await self._first_queued(session, s)
        events = Events(session, service)
        hint = "work" if following is not None else None
        data = {"state": outcome.state, "released": freed}
        events.add("turn_ended", name, data, hint)
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
            {"_id": key(session, name)}, {"$set": {"stop": True}}, session=s
        )
        events = Events(session, service)
        events.add("stop", name, {}, "stop")
        await self._service.update_one({"_id": session}, {"$inc": {"ev": 1}}, session=s)
        await events.write(self._events, s)
        return name

    async def stopping(self, holder: str) -> list[str]:
        """The sessions ``holder`` holds whose running turn was asked to stop, sorted.

        One query on the index ``(h, sr)``: a lease expired but not yet taken over is still
        the holder's; a released one has no holder.
        """
        with reaching(f"read the stops for holder {holder!r}"):
            docs = await stops_cursor(self._service, holder).to_list(None)
        return [str(d["_id"]) for d in docs]
