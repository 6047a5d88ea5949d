"""A turn's view of the store: the core :class:`~steerable.Store` verbs, fenced by its lease.

The core loop saves through a :class:`~steerable.Session`; under the service that session's
store is this view, so every save-and-take of a step becomes one ``ServiceStore.step`` call
that carries the turn's lease. The first transcript read is answered from the claim (the
claim read it already), so a turn costs no read of its own. Where the store's ``end_turn``
takes the turn's last save (``last=``), the save of the answer (or a ``final`` one) is kept
and the replica's end stores it with the end, in one call; any other call of the turn
first stores it, so the order of writes is the run's.

Where the claim made the turn's first step (``claim(first=True)``: the prompt stored, the
steers waiting taken), the turn's first save, the same save, is answered from the claim with
no call. A first call that is anything else finds the store ahead of the turn: it raises
:class:`Ahead` (a :class:`StoreUnavailable`) and the replica carries the turn on from what is
stored, as after a failed save, so the claim's step is never stored twice nor lost.

The tool journal's verbs and the repair's ``replace`` go to the store as they are, not
fenced: marking a call started is atomic in the store (of two holders, one is told a call
is new), a recorded result is what the tool did whoever records it, and ``replace`` is a
compare-and-swap of the tail that any write in between turns into a conflict.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

from steerable import codec, telemetry
from steerable.errors import Fenced, StoreUnavailable, UsageError
from steerable.messages import Message, ToolResult
from steerable.service._observe import Observers
from steerable.service_store import Input, Lease, ServiceStore, counts_as_step
from steerable.store import Steer, Store, journaling, repairable

log = logging.getLogger("steerable.service")


class LeaseCell:
    """The current lease of a turn (renewals replace it) and whether it was lost."""

    __slots__ = ("behind", "fenced", "lease", "steps", "store_failed", "taken", "traces")

    def __init__(self, lease: Lease) -> None:
        self.lease = lease
        self.fenced = False
        self.store_failed = False  # a write failed on the store: the turn is carried on
        self.behind = False  # its first call was not its claim's first step: carried on too
        self.steps = 0  # the steps this holder stored
        self.taken = 0  # the steers they took
        self.traces: dict[str, dict[str, str]] = {}  # a taken steer's trace context, by id


class Ahead(StoreUnavailable):
    """The turn's first call was not the first step its claim made: carry it on from what is
    stored (raised once; the replica reads the transcript and runs the turn from it)."""


class First(NamedTuple):
    """The turn's first step, made by its claim: the prompt's message stored at ``at``, and
    the steers ``taken`` after it."""

    at: int
    prompt: Message
    taken: list[Message]


class Pending(NamedTuple):
    """A turn's last save, kept for the turn's end (``end_turn(last=, at=)``)."""

    at: int
    messages: list[Message]
    final: bool


def _last(messages: Sequence[Message], final: bool) -> bool:
    """Whether a save (taking no steer) is a turn's last: a ``final`` one, or one ending in
    an answer (an assistant message that calls no tool: no model request follows it)."""
    if final:
        return True
    return bool(messages) and messages[-1].role == "assistant" and not messages[-1].tool_calls


class FencedStore:
    """The :class:`~steerable.Store` verbs of one turn's session, every write fenced."""

    __slots__ = (
        "_ahead",
        "_cell",
        "_claimed",
        "_defer",
        "_observers",
        "_pending",
        "_service",
        "_session",
        "_store",
        "_turn",
        "_written",
        "stored",
    )

    def __init__(
        self,
        store: Store,
        service: ServiceStore,
        cell: LeaseCell,
        claimed: list[Message],
        *,
        written: Callable[[str], None] | None = None,
        observers: Observers | None = None,
        turn: str = "",
        defer_last: bool = False,
        ahead: First | None = None,
    ) -> None:
        self._store = store
        self._ahead = ahead  # the first step the claim made, until the turn's first call
        self._defer = defer_last  # the store's end_turn takes the turn's last save (last=)
        self._pending: Pending | None = None
        self._observers = observers
        self._turn = turn
        self._written = written  # told after each step it stored
        self._service = service
        self._cell = cell
        self._session = cell.lease.session
        self._claimed: list[Message] | None = claimed
        self.stored: list[Message] | None = list(claimed)
        """The session's stored transcript as this turn's calls saw it: the claim's, then
        each save appended (None once a call left it unknown: a failed save, a replace)."""

    def _mine(self, session: str) -> None:
        if session != self._session:
            raise UsageError(f"this turn's store serves session {self._session!r}, not {session!r}")

    async def messages(self, session: str) -> list[Message]:
        """The transcript: the claim's copy the first time, the store's after."""
        self._mine(session)
        if self._claimed is not None:
            claimed, self._claimed = self._claimed, None
            return list(claimed)
        if self._ahead is not None:
            self._behind()
        await self._flush()
        self.stored = None
        read = await self._store.messages(session)
        self.stored = list(read)
        return read

    async def save_last(self, session: str, messages: Sequence[Message], *, at: int) -> None:
        """The save of a turn that reached ``max_steps``: fenced, takes nothing, no step."""
        await self.save(session, messages, at=at, final=True)

    async def save(
        self,
        session: str,
        messages: Sequence[Message],
        *,
        at: int,
        take: int = 0,
        final: bool = False,
    ) -> list[Message]:
        """The step's save-and-take, one fenced store call; the turn's last save (its answer,
        or a ``final`` one) is kept for the turn's end, which stores it in the same call,
        unless another call of the turn comes first."""
        self._mine(session)
        self._claimed = None
        lease = self._cell.lease
        if self._cell.fenced:  # lost or abandoned: refused here, without a store call
            raise Fenced(lease.session, lease.epoch, None)
        if self._ahead is not None:
            return await self._first(messages, at, take, final)
        if self._defer and take == 0 and self._pending is None and _last(messages, final):
            for message in messages:
                codec.encode(message)  # refused now, as the store would refuse it
            self._pending = Pending(at, list(messages), final)
            return []
        await self._flush()
        return await self._step(messages, at, take, final)

    async def _first(
        self, messages: Sequence[Message], at: int, take: int, final: bool
    ) -> list[Message]:
        """The turn's first save, where its claim made the first step: that step's answer if
        it is the same save, else :class:`Ahead`."""
        ahead, self._ahead = self._ahead, None
        assert ahead is not None
        same = list(messages) == [ahead.prompt] and at == ahead.at
        if not same or final or take < len(ahead.taken):
            self._behind()
        stored = self.stored
        self.stored = None if stored is None else [*stored, ahead.prompt, *ahead.taken]
        await self._stepped(ahead.taken)
        return list(ahead.taken)

    def _behind(self) -> None:
        """The turn's call does not follow what its claim stored: carry it on from the store."""
        self._ahead = None
        self._cell.store_failed = self._cell.behind = True
        raise Ahead(
            f"session {self._session!r}: the turn's first call was not the first step its"
            " claim made; it is carried on from the stored transcript"
        )

    def take_pending(self) -> Pending | None:
        """The turn's last save, kept for its end (None: none); the end stores it now."""
        pending, self._pending = self._pending, None
        return pending

    async def _flush(self) -> None:
        """Store the kept last save before any other call of the turn (it was not last)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            await self._step(pending.messages, pending.at, 0, pending.final)

    async def _step(
        self, messages: Sequence[Message], at: int, take: int, final: bool
    ) -> list[Message]:
        lease = self._cell.lease
        stored, self.stored = self.stored, None  # unknown until the save answers
        try:
            if final:  # said only when set: a store that predates the keyword serves the rest
                taken = await self._service.step(lease, messages, at=at, take=0, final=True)
            else:
                taken = await self._service.step(lease, messages, at=at, take=take)
        except Fenced:
            self._cell.fenced = True
            raise
        except StoreUnavailable:
            self._cell.store_failed = True
            raise
        if stored is not None and at == len(stored):
            self.stored = [*stored, *messages, *taken]
        self._cell.steps += counts_as_step(messages, take, final=final)
        self._cell.taken += len(taken)
        await self._stepped(taken)
        return taken

    async def _stepped(self, taken: list[Message]) -> None:
        """Tell of a step stored (by a call, or by the claim): the ``written`` callback, and
        the observers of the steers it took."""
        if self._written is not None:
            self._written(self._session)
        if taken and (self._observers or telemetry.recording()):
            await self._observe(taken)

    async def _observe(self, taken: list[Message]) -> None:
        """Read the taken steers' inputs (their arrival and trace context) for the observers
        and the turn's span; only when something listens. A read that fails loses only this."""
        now = time.time()
        try:
            views = [await self._service.input(self._session, m.id) for m in taken]
        except Exception as exc:
            log.debug("session %r: the taken steers were not read (%s)", self._session, exc)
            return
        found = [v for v in views if v is not None]
        for view in found:
            if view.trace:
                self._cell.traces[view.id] = view.trace
        if self._observers:
            waits = [max(0.0, now - v.at) for v in found]
            self._observers.call("steers_taken", self._session, self._turn, waits)
        span = telemetry.current_turn()
        if span is not None and found:
            for view in found:
                attributes = {"steerable.input.id": view.id, "steerable.step": view.step or 0}
                link = telemetry.link(view.trace, attributes)
                if link is not None:
                    span.add_link(link.context, link.attributes)
            span.add_event(
                "steerable.steers_taken",
                {
                    "steerable.input.ids": [v.id for v in found],
                    "steerable.step": found[0].step or 0,
                },
            )

    def steer_traces(self, ids: Sequence[str]) -> dict[str, dict[str, str]]:
        """The trace contexts of steers this turn took, by id (those it read: see ``save``)."""
        traces = self._cell.traces
        return {id: traces[id] for id in ids if id in traces}

    async def take_steers(self, session: str, *, at: int | None, limit: int) -> list[Message]:
        """Take the turn's steers at ``at`` (or at the transcript's end), fenced."""
        if at is None:
            at = len(await self.messages(session))
        return await self.save(session, (), at=at, take=limit)

    async def steer(self, session: str, steer: Steer) -> None:
        """A steer left by the run (one its box did not apply) waits as a steer input."""
        self._mine(session)
        await self._flush()
        await self._service.enqueue(session, Input("steer", steer.text, steer.id))

    async def steers(self, session: str) -> list[Steer]:
        """The steers waiting for this turn, oldest first."""
        self._mine(session)
        await self._flush()
        status = await self._service.status(session)
        turn = status.turn.id if status.turn else None
        return [Steer(w.text, w.id) for w in status.waiting if w.turn == turn and turn]

    async def begin_calls(self, session: str, keys: Sequence[str]) -> dict[str, ToolResult | None]:
        """Mark tool calls started in the session's journal (not fenced: see above)."""
        self._mine(session)
        await self._flush()
        return await journaling(self._store).begin_calls(session, keys)

    async def end_call(self, session: str, key: str, result: ToolResult) -> ToolResult:
        """Record a tool call's result in the session's journal (not fenced: see above)."""
        self._mine(session)
        await self._flush()
        return await journaling(self._store).end_call(session, key, result)

    async def replace(
        self, session: str, *, at: int, old: Sequence[str], messages: Sequence[Message]
    ) -> None:
        """Swap the transcript's tail, compared first (a conflict if anything came between)."""
        self._mine(session)
        if self._cell.fenced:
            lease = self._cell.lease
            raise Fenced(lease.session, lease.epoch, None)
        self._claimed = None
        if self._ahead is not None:
            self._behind()
        await self._flush()
        self.stored = None  # and the store gave the transcript a new mark
        await repairable(self._store).replace(session, at=at, old=old, messages=messages)
