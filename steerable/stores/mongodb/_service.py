"""The MongoDB store's service tables: leases, turns, steps, ends and stops, and hints.

The behaviour is the memory reference's (:mod:`steerable.stores._memory_service`); these
modules say how MongoDB keeps it: the documents and their fields in :mod:`._documents`,
every write one transaction locked on the session's service document in
:mod:`._transactions`, the queue (``enqueue``, ``cancel``) in :mod:`._queue`, the reads and
the session's metadata in :mod:`._views`, and here the turn's verbs. Messages go to the
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

A claim of a new turn counts the steers already offered to its prompt (offered while it
was the head of the queue) as offered to the turn, so later offers respect its cap; its
first step takes them. ``end_turn`` frees the steers offered and never taken, and lists
them in its ``turn_ended`` event. A claim's transaction locks the service document, whose
``mk`` is the transcript's mark; after the commit the claim reads the head and only the
chunks and blobs of the messages the claimer does not hold under that mark (see
:meth:`MongoServiceTables._unknown` for a ``replace`` in between).

A claim with ``first`` makes the new turn's first step in its own transaction, by the
step's code (:meth:`MongoServiceTables._stepped`) on what the claim has locked and read:
the prompt's message appended at the turn's start (its blob, if any, written in the
transaction), the offered steers read (in place of the claim's count, unless the cap is
reached) and taken, their update and the step's events; the turn is inserted with the
step's counts, and the service document's counters and the events are written once for
both. Beside the claim alone that is one command (the append) and the tail's ids read with
the length, where a step after the claim is eight commands and a commit. A prompt whose id
the tail holds makes no step; one whose id a chunk holds is refused by the unique index,
which aborts the transaction, and the claim is made again without the step.

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
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import UTC
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
    Claim,
    Hint,
    Input,
    Known,
    Lease,
    Outcome,
    Renewal,
    counts_as_step,
    known_length,
    message_event,
)
from steerable.stores.mongodb import _layout as layout
from steerable.stores.mongodb._documents import NOW, Doc, input_of, key
from steerable.stores.mongodb._errors import reaching
from steerable.stores.mongodb._layout import Staged
from steerable.stores.mongodb._queue import MongoQueue
from steerable.stores.mongodb._transactions import Events
from steerable.stores.mongodb._views import MongoServiceViews

_T = TypeVar("_T")
_Claimed = (
    tuple[Lease, str, Input, int, bool, int, int, int, bool, str | None, str, list[Message] | None]
    | None
)
"""A claim's transaction's answer, before its messages are read; None: nothing claimed."""
_SCAN = 16  # candidates a claim that names no session tries
_IDS: Doc = {"i": 1}


class _PromptStored(Exception):
    """A claim's first step met the prompt's id in a chunk: the claim is made without it."""


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


class MongoServiceTables(MongoQueue, MongoServiceViews):
    """The :class:`steerable.service_store.ServiceStore` verbs of :class:`MongoStore`."""

    if TYPE_CHECKING:  # provided by MongoStore

        async def _flush(self, session: str, marked: int) -> None: ...
        async def _write_blobs(self, staged: Staged) -> None: ...
        async def _drop_blobs(self, staged: Staged) -> None: ...
        async def messages(self, session: str) -> list[Message]: ...
        async def _head_of(self, session: str) -> Doc | None: ...
        async def _messages_from(
            self, session: str, head: Doc | None, first: int
        ) -> list[Message]: ...

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

    # -- claims and leases -----------------------------------------------------------------

    async def claim(
        self,
        holder: str,
        *,
        seconds: float,
        cap: int,
        session: str | None = None,
        known: Mapping[str, Known] | None = None,
        first: bool = False,
    ) -> Claim | None:
        """Claim one session with work and no live lease (``session`` only, if given),
        leaving out the messages the claimer knows under the transcript's mark, and make a
        new turn's first step in the claim's transaction if ``first``."""
        with reaching("claim a session"):
            if session is not None:
                return await self._claim(session, holder, seconds, cap, known, first)
            hello = await self.db.client.admin.command("hello")
            now = int(hello["localTime"].replace(tzinfo=UTC).timestamp() * 1000)
            candidates = self._service.find({"w": True, "x": {"$lte": now}}, {"_id": 1})
            for doc in await candidates.sort("x", 1).limit(_SCAN).to_list(None):
                claim = await self._claim(doc["_id"], holder, seconds, cap, known, first)
                if claim is not None:
                    return claim
            return None

    async def _claim(
        self,
        session: str,
        holder: str,
        seconds: float,
        cap: int,
        known: Mapping[str, Known] | None,
        first: bool,
    ) -> Claim | None:
        """The claim's transaction (through :meth:`_saving`, which flushes the head after a
        first step that made it big), then the messages the claimer does not hold.

        A first step whose prompt's id a chunk holds is refused by the unique index, which
        aborts the transaction: the claim is made again without the step (the tail's ids
        are checked in the transaction, so only a flushed id costs that second round)."""

        def claiming(
            step: bool,
        ) -> Callable[[AsyncClientSession], Awaitable[tuple[_Claimed, Doc | None]]]:
            return lambda s: self._claim_in(s, session, holder, seconds, cap, step)

        try:
            found = await self._saving(session, Staged(), claiming(first))
        except _PromptStored:
            found = await self._saving(session, Staged(), claiming(False))
        if found is None:
            return None
        lease, turn, prompt, start, resumed, steps, took, cap, stop, previous, mark, taken = found
        end = start if taken is not None else None  # the transcript before the first step
        skip, messages, mark = await self._unknown(session, mark, known, end)
        return Claim(
            lease,
            turn,
            prompt,
            start,
            messages,
            resumed,
            steps,
            took,
            cap,
            stop,
            previous,
            mark,
            skip,
            taken,
        )

    async def _unknown(
        self, session: str, mark: str, known: Mapping[str, Known] | None, end: int | None = None
    ) -> tuple[int, list[Message], str]:
        """The messages a claimer does not hold (before position ``end``, if given: a first
        step's are left out), how many it holds, and the mark they are read under
        (``mark``, the one the claim's transaction locked).

        Read after the claim commits, as the whole transcript is: the head, then only the
        chunks and blobs at or after what the claimer holds. While the claimed turn runs a
        cut, a delete and a fork into the session are refused, but a ``replace`` is not: so
        when the claimer holds a prefix, the mark is read again after the messages, and if
        it changed, what the claimer holds need not be the start of what was read: the
        whole transcript is read instead, under no mark (""), which no claimer holds.
        """
        head = await self._head_of(session)
        stored = int(head["n"]) if head else 0
        until = stored if end is None else min(end, stored)
        skip = known_length(known, session, mark, until)
        messages = (await self._messages_from(session, head, skip))[: until - skip]
        if skip:
            now: Doc | None = await self._service.find_one({"_id": session}, {"mk": 1})
            if now is None or now.get("mk") != mark:
                return 0, (await self.messages(session))[:end], ""
        return skip, messages, mark

    async def _claim_in(
        self,
        s: AsyncClientSession,
        session: str,
        holder: str,
        seconds: float,
        cap: int,
        first: bool,
    ) -> tuple[_Claimed, Doc | None]:
        """The claim in ``s``, and the head if a first step wrote it (else None)."""
        free = {"$expr": {"$lte": ["$x", NOW]}}
        # `ph` keeps the holder this claim takes over: in one stage "$h" is still the old one
        claimed = {"ep": {"$add": ["$ep", 1]}, "h": {"$literal": holder}, "ph": "$h"}
        claimed["x"] = {"$add": ["$now", round(seconds * 1000)]}
        service = await self._lock(s, {"_id": session, "w": True} | free, claimed)
        if service is None:
            return None, None
        epoch, events = int(service["ep"]), Events(session, service)
        lease = Lease(session, holder, epoch, int(service["x"]) / 1000)
        resumed = service["run"] is not None
        change: Doc = {"$inc": {}}
        taken: list[Message] | None = None
        written: Doc | None = None
        if not resumed:
            prompt, turn, in_tail = await self._start(s, session, service, cap, first)
            name = prompt["i"]
            events.add("turn_started", name, {"epoch": epoch, "holder": holder, "resumed": False})
            if first and name not in in_tail:
                taken, written = await self._first_step(s, service, turn, prompt, in_tail, events)
            elif "of" not in turn:  # counted by the step, which is not made
                turn["of"] = await self._offered_count(s, service, name)
            await self._turns.insert_one(turn, session=s)
            change["$inc"] |= {"tn": 1, "q": -1, "wt": -1 - int(turn["tk"])}
            change["$set"] = {"run": name, "sr": False}
        else:
            name = service["run"]
            found: Doc | None = await self._turns.find_one_and_update(
                {"_id": key(session, name)},
                {"$set": {"ep": epoch}},
                return_document=ReturnDocument.AFTER,
                session=s,
            )
            held: Doc | None = await self._inputs.find_one({"_id": key(session, name)}, session=s)
            if found is None or held is None:
                raise StoreError(f"session {session!r}: the running turn {name!r} is missing")
            prompt, turn = held, found
            events.add("holder", name, {"holder": holder, "epoch": epoch})
            events.add("turn_started", name, {"epoch": epoch, "holder": holder, "resumed": True})
        change["$inc"]["ev"] = len(events.docs)
        await self._service.update_one({"_id": session}, change, session=s)
        await events.write(self._events, s)
        steps, took, stop = int(turn["steps"]), int(turn["tk"]), bool(turn["stop"])
        start, cap = int(turn["start"]), int(turn["cap"])
        previous = service.get("ph") if resumed else None
        mark = str(service.get("mk", ""))  # "": a document step 6 has not given one yet
        claim = (lease, name, input_of(prompt), start, resumed, steps, took, cap, stop, previous)
        return (*claim, mark, taken), written

    async def _start(
        self, s: AsyncClientSession, session: str, service: Doc, cap: int, first: bool
    ) -> tuple[Doc, Doc, set[str]]:
        """Make the head of the queue the prompt of a new turn; the prompt, the turn (not
        inserted yet) and, if ``first``, the ids in the head's tail.

        The steers offered to the prompt while it waited count as offered to the turn; a
        first step that can take them all reads them, so they are counted here only if
        not (``of`` left out: the caller counts them when no step is made).
        """
        prompt = await self._first_queued(session, s)
        if prompt is None:
            raise StoreError(f"session {session!r} says it has work but nothing waits")
        name = prompt["i"]
        await self._inputs.update_one(
            {"_id": prompt["_id"]}, {"$set": {"st": "prompt", "t": name}}, session=s
        )
        fields = {"n": 1, "tail.i": 1} if first else {"n": 1}
        head = await self._heads.find_one({"_id": session}, fields, session=s)
        turn: Doc = {"_id": key(session, name), "s": session, "i": name, "n": prompt["n"]}
        turn |= {"o": service["tn"] + 1, "start": int(head["n"]) if head else 0, "cap": cap}
        turn |= {"st": "running", "ep": service["ep"], "steps": 0, "tk": 0}
        turn |= {"stop": False, "end": None, "tx": json.dumps(""), "er": None}
        turn["sa"] = service["now"]
        if not first or cap == 0:
            turn["of"] = await self._offered_count(s, service, name)
        in_tail = {entry["i"] for entry in head.get("tail", ())} if head else set()
        return prompt, turn, in_tail

    async def _offered_count(self, s: AsyncClientSession, service: Doc, turn: str) -> int:
        """How many steers are offered to ``turn`` (no read when the counters say none)."""
        if int(service["wt"]) <= int(service["q"]):  # no steer is offered: to this head
            return 0
        query = {"s": service["_id"], "st": "waiting", "t": turn}
        return await self._inputs.count_documents(query, session=s)

    async def _first_step(
        self,
        s: AsyncClientSession,
        service: Doc,
        turn: Doc,
        prompt: Doc,
        in_tail: set[str],
        events: Events,
    ) -> tuple[list[Message], Doc | None]:
        """A new turn's first step in its claim's transaction, made by :meth:`_stepped` as
        a step makes it: the prompt's message at the turn's start, then the steers offered.

        ``turn`` (to be inserted) gets the step's counts, and ``of``: the steers taken, and
        any left waiting beyond the cap (counted only when the cap was reached). Returns the
        steers taken and the head; :class:`_PromptStored` if a chunk holds the prompt's id.
        """
        message = input_of(prompt).message(steered=False)
        staged = layout.stage(service["_id"], [(message.id, codec.encode(message))])
        if staged.blobs:
            await self._blobs_of(s, staged)
        start, cap = int(turn["start"]), int(turn["cap"])
        try:
            taken, head, done = await self._stepped(
                s, service, turn, start, in_tail, [message], staged, cap, False, events
            )
        except InvalidMessage:  # the unique index: a chunk holds the prompt's id
            raise _PromptStored from None
        turn["steps"], turn["tk"] = done["steps"], done["tk"]
        if "of" not in turn:  # the cap is not 0: the step read up to cap of them
            left = await self._offered_count(s, service, turn["i"]) if done["tk"] == cap else 0
            turn["of"] = done["tk"] + left
        return taken, head

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
