"""The MongoDB store's queue of inputs: ``enqueue`` (with its conditions) and ``cancel``.

Each is one transaction locked on the session's service document
(:mod:`._transactions`). An enqueue reads the id first (an id seen before is its first
answer: no lock, no condition), then locks, then decides where a steer goes from the
service document and at most one more read: the running turn's document when a turn runs,
else the head of the queue when one waits (``q`` > 0). The conditions (``if_idle``,
``expected_turn``, ``max_waiting``) are checked on those same values, from the counters
``wt`` and ``q``, before anything but the lock is written; a refusal aborts the
transaction, so the lock's write goes too and no seq or event id is used. A session that
has no service document is refused before one is made for it.

A cancel reads the input, then locks: a claim that made it a prompt, or a step that took
it, since this snapshot was taken conflicts with the lock, and the cancel runs again and
finds it so. Cancelling the head of the queue, when no turn runs, frees the steers offered
to it (each a turn of its own, in its place): found by the index ``(s, st, t, n)``, read
only when the counters say some steer is offered (``wt`` > ``q``).
"""

from __future__ import annotations

from contextlib import suppress
from dataclasses import dataclass

from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.errors import DuplicateKeyError

from steerable.errors import QueueFull, SessionNotIdle, StoreError, TurnMismatch
from steerable.service_store import Accepted, Input, InputView
from steerable.stores.mongodb._documents import (
    NEW_SESSION,
    Doc,
    input_view,
    key,
    new_input,
    new_session,
)
from steerable.stores.mongodb._errors import reaching
from steerable.stores.mongodb._transactions import (
    RETRIES,
    Events,
    Missing,
    Raced,
    ServiceTransactions,
)


@dataclass(frozen=True, slots=True)
class _Conditions:
    """An enqueue's conditions, checked in the contract's order by :meth:`refusal`."""

    if_idle: bool
    expected_turn: str | None
    max_waiting: int | None

    def refusal(
        self, session: str, running: str | None, waiting: int, offered: str | None
    ) -> StoreError | None:
        """The error of the first condition that refuses the enqueue, or None."""
        if self.if_idle and (running is not None or waiting > 0):
            return SessionNotIdle(session, running, waiting)
        if self.expected_turn is not None and offered != self.expected_turn:
            return TurnMismatch(session, self.expected_turn, offered)
        if self.max_waiting is not None and waiting >= self.max_waiting:
            return QueueFull(session, self.max_waiting)
        return None


class MongoQueue(ServiceTransactions):
    """``enqueue`` and ``cancel`` of :class:`MongoStore`; see the module docstring."""

    async def enqueue(
        self,
        session: str,
        input: Input,
        *,
        if_idle: bool = False,
        expected_turn: str | None = None,
        max_waiting: int | None = None,
    ) -> Accepted:
        """Record ``input`` in the session's order of arrival; an id seen before is a no-op.

        Refused whole (SessionNotIdle, TurnMismatch, QueueFull) by the conditions given.
        """
        conditions = _Conditions(if_idle, expected_turn, max_waiting)

        async def body(s: AsyncClientSession) -> Accepted:
            return await self._enqueue(s, session, input, conditions)

        with reaching(f"enqueue an input of session {session!r}"):
            for _ in range(RETRIES):
                try:
                    return await self._transaction(body)
                except Missing:
                    new = {"$setOnInsert": new_session()}
                    with suppress(DuplicateKeyError):  # made by a racing writer meanwhile
                        await self._service.update_one({"_id": session}, new, upsert=True)
                except Raced:
                    pass  # the same id inserted by a racing writer: its answer is read next
        raise StoreError(f"session {session!r}: an enqueue kept racing")

    async def _enqueue(
        self, s: AsyncClientSession, session: str, input: Input, conditions: _Conditions
    ) -> Accepted:
        seen = await self._inputs.find_one({"_id": key(session, input.id)}, session=s)
        if seen is not None:
            return Accepted(seen["i"], seen["kd"], int(seen["n"]), seen["of"], seen["ah"], True)
        service = await self._lock(s, {"_id": session})
        running: Doc | None = None
        offered: str | None = None
        if service is not None and service["run"] is not None:
            running = await self._turns.find_one({"_id": key(session, service["run"])}, session=s)
            if running is None:
                raise StoreError(f"session {session!r}: the running turn is missing")
            if input.kind == "steer" and not running["stop"] and running["of"] < running["cap"]:
                offered = running["i"]
        elif service is not None and input.kind == "steer" and int(service["q"]):
            head = await self._first_queued(session, s)  # the turn the next claim starts
            offered = head["i"] if head is not None else None
        state = service or NEW_SESSION  # a session never written to: idle, nothing waits
        refused = conditions.refusal(session, state["run"], int(state["wt"]), offered)
        if refused is not None:
            raise refused
        if service is None:
            raise Missing
        if running is not None and offered is not None:
            await self._turns.update_one({"_id": running["_id"]}, {"$inc": {"of": 1}}, session=s)
        ahead = 0 if offered else (running is not None) + int(service["q"])
        seq = int(service["seq"]) + 1
        doc = new_input(session, input, seq=seq, offered=offered, ahead=ahead, at=service["now"])
        try:
            await self._inputs.insert_one(doc, session=s)
        except DuplicateKeyError:
            raise Raced from None
        events = Events(session, service)
        hint = "work" if running is None else None
        events.add("input", offered, {"id": input.id, "kind": input.kind, "turn": offered}, hint)
        change: Doc = {"$inc": {"seq": 1, "ev": 1, "wt": 1, "q": 0 if offered else 1}}
        if not offered:
            change["$set"] = {"w": True}
        await self._service.update_one({"_id": session}, change, session=s)
        await events.write(self._events, s)
        return Accepted(input.id, input.kind, seq, offered, ahead)

    async def cancel(self, session: str, id: str) -> InputView | None:
        """Take back the waiting input ``id`` (it becomes ``cancelled``); its view after.

        An input taken or become a prompt, or cancelled already, is returned as it is (no
        event); None if the session never had it.
        """
        with reaching(f"cancel an input of session {session!r}"):
            return await self._transaction(lambda s: self._cancel(s, session, id))

    async def _cancel(self, s: AsyncClientSession, session: str, id: str) -> InputView | None:
        doc = await self._inputs.find_one({"_id": key(session, id)}, session=s)
        if doc is None or doc["st"] != "waiting":
            return input_view(doc) if doc is not None else None
        service = await self._lock(s, {"_id": session})
        if service is None:
            raise StoreError(f"session {session!r}: input {id!r} has no service document")
        offered: str | None = doc["t"]
        released: list[Doc] = []
        if offered is None and service["run"] is None:  # the head, maybe, and its steers
            released = await self._offered(s, service, id, fields={"i": 1})
        if released:
            await self._inputs.update_many(
                {"_id": {"$in": [row["_id"] for row in released]}},
                {"$set": {"t": None}},
                session=s,
            )
        await self._inputs.update_one(
            {"_id": doc["_id"]}, {"$set": {"st": "cancelled", "t": None}}, session=s
        )
        queued = int(service["q"]) - (offered is None) + len(released)
        ids = [row["i"] for row in released]
        events = Events(session, service)
        events.add("cancelled", offered, {"id": id, "released": ids})
        change: Doc = {"$set": {"q": queued, "w": service["run"] is not None or queued > 0}}
        change["$inc"] = {"wt": -1, "ev": 1}
        await self._service.update_one({"_id": session}, change, session=s)
        await events.write(self._events, s)
        return input_view(doc | {"st": "cancelled", "t": None})
