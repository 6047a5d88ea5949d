"""The MongoDB store's claims: a new turn's start, a takeover, and a new turn's first step
made with its claim (``claim(first=True)``).

A claim of a new turn counts the steers already offered to its prompt (offered while it
was the head of the queue) as offered to the turn, so later offers respect its cap; its
first step takes them. A claim's transaction locks the service document, whose
``mk`` is the transcript's mark; after the commit the claim reads the head and only the
chunks and blobs of the messages the claimer does not hold under that mark (see
:meth:`MongoClaims._unknown` for a ``replace`` in between).

A claim with ``first`` makes the new turn's first step in its own transaction, by the
step's code (``_stepped`` of :mod:`._service`) on what the claim has locked and read:
the prompt's message appended at the turn's start (its blob, if any, written in the
transaction), the offered steers read (in place of the claim's count, unless the cap is
reached) and taken, their update and the step's events; the turn is inserted with the
step's counts, and the service document's counters and the events are written once for
both. Beside the claim alone that is one command (the append) and the tail's ids read with
the length, where a step after the claim is eight commands and a commit. A prompt whose id
the tail holds makes no step; one whose id a chunk holds is refused by the unique index,
which aborts the transaction, and the claim is made again without the step.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC
from typing import TYPE_CHECKING, TypeVar

from pymongo import ReturnDocument
from pymongo.asynchronous.client_session import AsyncClientSession

from steerable import codec
from steerable.errors import InvalidMessage, StoreError
from steerable.messages import Message
from steerable.service_store import Claim, Input, Known, Lease, known_length
from steerable.stores.mongodb import _layout as layout
from steerable.stores.mongodb._documents import NOW, Doc, input_of, key
from steerable.stores.mongodb._errors import reaching
from steerable.stores.mongodb._layout import Staged
from steerable.stores.mongodb._transactions import Events, ServiceTransactions

_T = TypeVar("_T")
_SCAN = 16  # candidates a claim that names no session tries
_Claimed = (
    tuple[Lease, str, Input, int, bool, int, int, int, bool, str | None, str, list[Message] | None]
    | None
)
"""A claim's transaction's answer, before its messages are read; None: nothing claimed."""


class _PromptStored(Exception):
    """A claim's first step met the prompt's id in a chunk: the claim is made without it."""


class MongoClaims(ServiceTransactions):
    """``claim`` of :class:`MongoStore`; see the module docstring."""

    if TYPE_CHECKING:  # provided by MongoStore and MongoServiceTables

        async def messages(self, session: str) -> list[Message]: ...
        async def _head_of(self, session: str) -> Doc | None: ...
        async def _messages_from(
            self, session: str, head: Doc | None, first: int
        ) -> list[Message]: ...
        async def _blobs_of(self, s: AsyncClientSession, staged: Staged) -> None: ...
        async def _saving(
            self,
            session: str,
            staged: Staged,
            body: Callable[[AsyncClientSession], Awaitable[tuple[_T, Doc | None]]],
        ) -> _T: ...
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
        ) -> tuple[list[Message], Doc | None, dict[str, int]]: ...

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
