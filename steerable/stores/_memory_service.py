"""The memory store's service tables: inputs, turns, the lease and events, in dicts.

The reference for the other backends: each verb does its whole work under the store's lock
without awaiting, so each is atomic. The clock is this process's (``time.time``), which is
the "database's clock" of a store that lives in one process.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from steerable import codec
from steerable.errors import (
    Fenced,
    InvalidMessage,
    QueueFull,
    SessionBusy,
    SessionNotIdle,
    TranscriptConflict,
    TurnMismatch,
)
from steerable.messages import Message
from steerable.service_store import (
    Accepted,
    Claim,
    Entry,
    EventKind,
    Hint,
    Input,
    InputState,
    InputView,
    Known,
    Lease,
    Outcome,
    Renewal,
    ServiceEvent,
    SessionState,
    SessionSummary,
    Status,
    TurnState,
    TurnView,
    counts_as_step,
    known_length,
    message_event,
    turn_of,
)


@dataclass
class _Input:
    input: Input
    seq: int
    offered: str | None  # the turn it was offered to on arrival (the first answer)
    ahead: int
    at: float
    state: InputState = "waiting"
    turn: str | None = None  # offered to (waiting), taken by, or prompt of
    step: int | None = None


@dataclass
class _Turn:
    id: str
    start: int
    cap: int
    seq: int
    started_at: float
    state: TurnState = "running"
    epoch: int = 0
    steps: int = 0
    steers_taken: int = 0
    offered: int = 0
    stop_requested: bool = False
    end: int | None = None
    text: str = ""
    error: str | None = None
    ended_at: float | None = None
    usage: dict[str, int] = field(default_factory=dict)


@dataclass
class _Service:
    inputs: dict[str, _Input] = field(default_factory=dict)  # in order of arrival
    turns: dict[str, _Turn] = field(default_factory=dict)  # in order of claim
    events: list[ServiceEvent] = field(default_factory=list)
    epoch: int = 0
    holder: str | None = None
    expires: float = 0.0
    running: str | None = None
    forgotten: int = 0  # the events before the session's last delete: ids go on after them
    metadata: dict[str, Any] = field(default_factory=dict)

    def emit(self, kind: EventKind, turn: str | None, data: dict[str, Any]) -> None:
        id = self.forgotten + len(self.events) + 1
        self.events.append(ServiceEvent(id, kind, turn, data, time.time()))

    def queued(self) -> list[_Input]:
        return [i for i in self.inputs.values() if i.state == "waiting" and i.turn is None]

    def waiting(self) -> list[_Input]:
        return [i for i in self.inputs.values() if i.state == "waiting"]

    def offered_to(self, turn: str) -> list[_Input]:
        return [i for i in self.inputs.values() if i.state == "waiting" and i.turn == turn]

    def target(self) -> str | None:
        """The turn a steer arriving now is offered to: the started one (see the contract)."""
        if self.running is not None:
            running = self.turns[self.running]
            if running.stop_requested or running.offered >= running.cap:
                return None
            return running.id
        queued = self.queued()
        return queued[0].input.id if queued else None


def _summary(name: str, svc: _Service) -> SessionSummary:
    queued = len(svc.queued())
    state: SessionState = "running" if svc.running else "queued" if queued else "idle"
    updated = svc.events[-1].at if svc.events else 0.0
    return SessionSummary(name, state, svc.running, queued, updated, dict(svc.metadata))


def _turn_view(service: _Service, turn: _Turn) -> TurnView:
    live = turn.id == service.running
    return TurnView(
        turn.id,
        turn.state,
        holder=service.holder if live else None,
        epoch=turn.epoch,
        lease_expires_at=service.expires if live and service.holder else None,
        steps=turn.steps,
        steers_taken=turn.steers_taken,
        stop_requested=turn.stop_requested,
        start=turn.start,
        end=turn.end,
        text=turn.text,
        error=turn.error,
        seq=turn.seq,
        started_at=turn.started_at,
        ended_at=turn.ended_at,
        usage=dict(turn.usage),
    )


def _input_view(row: _Input) -> InputView:
    i = row.input
    return InputView(
        *(i.id, i.kind, i.text, row.seq, row.state, row.turn, row.step, row.at),
        *(dict(i.metadata), dict(i.trace)),
    )


class MemoryServiceTables:
    """The :class:`steerable.service_store.ServiceStore` verbs of :class:`MemoryStore`."""

    def _service_init(self) -> None:
        self._service: dict[str, _Service] = {}
        self._listeners: list[tuple[asyncio.AbstractEventLoop, asyncio.Queue[Hint]]] = []

    # provided by MemoryStore
    def _transcript(self, session: str) -> tuple[list[Message], set[str]]:
        raise NotImplementedError

    def _times(self, session: str) -> list[float]:
        raise NotImplementedError

    def _mark(self, session: str) -> str:
        raise NotImplementedError

    _lock: Any

    def _svc(self, session: str) -> _Service:
        state = self._service.get(session)
        if state is None:
            state = self._service[session] = _Service()
        return state

    def _busy(self, session: str, what: str) -> None:
        """:class:`SessionBusy` if a turn runs on ``session``; called under the lock."""
        svc = self._service.get(session)
        if svc is not None and svc.running is not None:
            raise SessionBusy(session, svc.running, what)

    def _has_service(self, session: str) -> bool:
        """Whether ``session`` has inputs or metadata; called under the lock."""
        svc = self._service.get(session)
        return svc is not None and bool(svc.inputs or svc.metadata)

    def _forget_service(self, session: str) -> bool:
        """Forget the session's inputs, turns and events, keeping its epoch and event ids."""
        svc = self._service.get(session)
        if svc is None:
            return False
        self._service[session] = _Service(
            epoch=svc.epoch, forgotten=svc.forgotten + len(svc.events)
        )
        return bool(svc.inputs or svc.metadata)

    def _hint(self, kind: Any, session: str) -> None:
        for loop, queue in list(self._listeners):
            with contextlib.suppress(RuntimeError):  # a closed loop: its listener is gone
                loop.call_soon_threadsafe(queue.put_nowait, Hint(kind, session))

    @asynccontextmanager
    async def hints(self) -> AsyncIterator[AsyncIterator[Hint]]:
        """Hints of work and stops, from every task and thread of this process."""
        entry = (asyncio.get_running_loop(), asyncio.Queue[Hint]())
        self._listeners.append(entry)

        async def iterate() -> AsyncIterator[Hint]:
            while True:
                yield await entry[1].get()

        try:
            yield iterate()
        finally:
            self._listeners.remove(entry)

    async def enqueue(
        self,
        session: str,
        input: Input,
        *,
        if_idle: bool = False,
        expected_turn: str | None = None,
        max_waiting: int | None = None,
    ) -> Accepted:
        """Record ``input`` in the session's order of arrival; an id seen before is a no-op."""
        with self._lock:
            svc = self._svc(session)
            seen = svc.inputs.get(input.id)
            if seen is not None:
                i = seen.input
                return Accepted(i.id, i.kind, seen.seq, seen.offered, seen.ahead, duplicate=True)
            waiting = len(svc.waiting())
            if if_idle and (svc.running is not None or waiting):
                raise SessionNotIdle(session, svc.running, waiting)
            offered = svc.target() if input.kind == "steer" else None
            if expected_turn is not None and offered != expected_turn:
                raise TurnMismatch(session, expected_turn, offered)
            if max_waiting is not None and waiting >= max_waiting:
                raise QueueFull(session, max_waiting)
            if offered is not None and offered in svc.turns:
                svc.turns[offered].offered += 1
            ahead = 0 if offered else (svc.running is not None) + len(svc.queued())
            row = _Input(input, len(svc.inputs) + 1, offered, ahead, time.time(), turn=offered)
            svc.inputs[input.id] = row
            svc.emit("input", offered, {"id": input.id, "kind": input.kind, "turn": offered})
            start_now = svc.running is None
        if start_now:
            self._hint("work", session)
        return Accepted(input.id, input.kind, row.seq, offered, ahead)

    async def cancel(self, session: str, id: str) -> InputView | None:
        """Take back the waiting input ``id``; its view after (None if never had)."""
        with self._lock:
            svc = self._service.get(session)
            row = svc.inputs.get(id) if svc else None
            if svc is None or row is None:
                return None
            if row.state == "waiting":
                was = row.turn
                released: list[str] = []
                if was is None and svc.running is None:  # the head: its offered steers go free
                    for other in svc.offered_to(id):
                        other.turn = None
                        released.append(other.input.id)
                row.state, row.turn = "cancelled", None
                svc.emit("cancelled", was, {"id": id, "released": released})
            return _input_view(row)

    async def stopping(self, holder: str) -> list[str]:
        """The sessions ``holder`` holds whose running turn was asked to stop."""
        with self._lock:
            return sorted(
                name
                for name, svc in self._service.items()
                if svc.holder == holder
                and svc.running is not None
                and svc.turns[svc.running].stop_requested
            )

    async def set_metadata(self, session: str, metadata: dict[str, Any]) -> None:
        """Replace the session's metadata."""
        with self._lock:
            self._svc(session).metadata = dict(metadata)

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
        """Claim one session with work and no live lease (``session`` only, if given); a new
        turn's first step with it, if ``first``."""
        with self._lock:
            now = time.time()
            names = [session] if session is not None else list(self._service)
            for name in names:
                svc = self._service.get(name)
                if svc is None or (svc.holder is not None and svc.expires > now):
                    continue
                if svc.running is None and not svc.queued():
                    continue
                claim = self._claim(name, svc, holder, now + seconds, cap, known)
                if first and not claim.resumed:
                    claim = self._first(claim)
                return claim
            return None

    def _first(self, claim: Claim) -> Claim:
        """The new turn's first step, under the store's lock (none if the prompt's id is
        already stored)."""
        _, ids = self._transcript(claim.lease.session)
        if claim.prompt.id in ids:
            return claim
        prompt = claim.prompt.message(steered=False)
        taken = self._step(claim.lease, [prompt], claim.start, claim.cap, False)
        turn = self._service[claim.lease.session].turns[claim.turn]
        return dataclasses.replace(
            claim, taken=taken, steps=turn.steps, steers_taken=turn.steers_taken
        )

    def _claim(
        self,
        name: str,
        svc: _Service,
        holder: str,
        expires: float,
        cap: int,
        known: Mapping[str, Known] | None,
    ) -> Claim:
        svc.epoch += 1
        resumed = svc.running is not None
        previous = svc.holder if resumed else None
        svc.holder, svc.expires = holder, expires
        messages, _ = self._transcript(name)
        if svc.running is None:
            prompt = svc.queued()[0]
            prompt.state, prompt.turn = "prompt", prompt.input.id
            turn = _Turn(prompt.input.id, len(messages), cap, prompt.seq, time.time())
            turn.offered = len(svc.offered_to(turn.id))
            svc.turns[turn.id] = turn
            svc.running = turn.id
        else:
            turn = svc.turns[svc.running]
            prompt = svc.inputs[turn.id]
            svc.emit("holder", turn.id, {"holder": holder, "epoch": svc.epoch})
        turn.epoch = svc.epoch
        svc.emit(
            "turn_started", turn.id, {"epoch": svc.epoch, "holder": holder, "resumed": resumed}
        )
        mark = self._mark(name)
        skip = known_length(known, name, mark, len(messages))
        return Claim(
            Lease(name, holder, svc.epoch, expires),
            turn.id,
            prompt.input,
            turn.start,
            messages[skip:],
            resumed,
            turn.steps,
            turn.steers_taken,
            turn.cap,
            turn.stop_requested,
            previous,
            mark,
            skip,
        )

    def _fenced(self, lease: Lease) -> tuple[_Service, _Turn]:
        svc = self._service.get(lease.session)
        if svc is None or svc.epoch != lease.epoch or svc.holder != lease.holder:
            raise Fenced(lease.session, lease.epoch, svc.epoch if svc else None)
        if svc.running is None:
            raise Fenced(lease.session, lease.epoch, svc.epoch)
        return svc, svc.turns[svc.running]

    async def renew(self, lease: Lease, *, seconds: float) -> Renewal:
        """Extend ``lease`` by ``seconds`` from now; :class:`Fenced` if it is stale."""
        with self._lock:
            svc, turn = self._fenced(lease)
            svc.expires = time.time() + seconds
            new = Lease(lease.session, lease.holder, lease.epoch, svc.expires)
            return Renewal(new, turn.stop_requested)

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
        for message in messages:
            codec.encode(message)
        with self._lock:
            return self._step(lease, messages, at, take, final)

    def _step(
        self, lease: Lease, messages: Sequence[Message], at: int, take: int, final: bool
    ) -> list[Message]:
        """``step``, under the store's lock."""
        svc, turn = self._fenced(lease)
        transcript, ids = self._transcript(lease.session)
        if at != len(transcript):
            raise TranscriptConflict(lease.session, at, len(transcript))
        new_ids = [m.id for m in messages]
        if len(set(new_ids)) != len(new_ids) or not ids.isdisjoint(new_ids):
            raise InvalidMessage(f"session {lease.session!r}: a message id is already stored")
        if counts_as_step(messages, take, final=final):
            turn.steps += 1
        room = 0 if turn.stop_requested else max(0, min(take, turn.cap - turn.steers_taken))
        offered = [i for i in svc.inputs.values() if i.state == "waiting" and i.turn == turn.id][
            :room
        ]
        taken: list[Message] = []
        for row in offered:
            row.state, row.step = "taken", turn.steps
            if row.input.id not in ids and row.input.id not in new_ids:
                taken.append(row.input.message(steered=True))
        turn.steers_taken += len(offered)
        position = len(transcript)
        for message in messages:
            svc.emit("message", turn.id, message_event(message, position))
            position += 1
        if offered:
            ids_taken = [r.input.id for r in offered]
            svc.emit("steers_taken", turn.id, {"ids": ids_taken, "step": turn.steps})
        for message in taken:
            svc.emit("message", turn.id, message_event(message, position))
            position += 1
        if counts_as_step(messages, take, final=final):
            svc.emit("step", turn.id, {"step": turn.steps, "length": position})
        transcript.extend(messages)
        transcript.extend(taken)
        self._times(lease.session).extend([time.time()] * (len(messages) + len(taken)))
        ids.update(new_ids)
        ids.update(m.id for m in taken)
        return taken

    async def end_turn(
        self,
        lease: Lease,
        outcome: Outcome,
        *,
        last: Sequence[Message] = (),
        at: int | None = None,
    ) -> str | None:
        """Record the turn's end and release the lease; the next turn's prompt id, if any
        (``last``: saved at ``at`` first, in the same atomic operation)."""
        for message in last:
            codec.encode(message)
        with self._lock:
            if last:
                assert at is not None, "end_turn(last=...) needs at="
                self._step(lease, last, at, 0, True)
            svc, turn = self._fenced(lease)
            transcript, _ = self._transcript(lease.session)
            turn.state, turn.text, turn.error = outcome.state, outcome.text, outcome.error
            turn.usage, turn.ended_at = dict(outcome.usage), time.time()
            turn.end = len(transcript)
            released: list[str] = []
            for row in svc.offered_to(turn.id):
                row.turn = None  # a turn of its own, in its place
                released.append(row.input.id)
            svc.running, svc.holder, svc.expires = None, None, 0.0
            svc.emit("turn_ended", turn.id, {"state": outcome.state, "released": released})
            queued = svc.queued()
            following = queued[0].input.id if queued else None
        if following is not None:
            self._hint("work", lease.session)
        return following

    async def stop(self, session: str) -> str | None:
        """Ask the running turn to stop; its id, or None when no turn runs."""
        with self._lock:
            svc = self._service.get(session)
            if svc is None or svc.running is None:
                return None
            turn = svc.turns[svc.running]
            if not turn.stop_requested:
                turn.stop_requested = True
                svc.emit("stop", turn.id, {})
        self._hint("stop", session)
        return turn.id

    async def status(self, session: str, *, limit: int = 100) -> Status:
        """The session's running turn, its first ``limit`` waiting inputs, and the counts."""
        with self._lock:
            svc = self._service.get(session)
            if svc is None:
                return Status(session, None, [], 0, 0)
            running = _turn_view(svc, svc.turns[svc.running]) if svc.running else None
            waiting = svc.waiting()
            return Status(
                session,
                running,
                [_input_view(i) for i in waiting[:limit]],
                len(svc.queued()),
                len(waiting),
                dict(svc.metadata),
            )

    async def inputs(
        self, session: str, *, after: int, limit: int, state: InputState | None = None
    ) -> list[InputView]:
        """Up to ``limit`` inputs with ``seq`` > ``after`` in order (only ``state``, if given)."""
        with self._lock:
            svc = self._service.get(session)
            rows = list(svc.inputs.values()) if svc else []
            kept = [r for r in rows[max(after, 0) :] if state is None or r.state == state]
            return [_input_view(r) for r in kept[:limit]]

    async def turns(self, session: str, *, after: int, limit: int) -> list[TurnView]:
        """Up to ``limit`` turns that started, in their prompts' order, ``seq`` > ``after``."""
        with self._lock:
            svc = self._service.get(session)
            if svc is None:
                return []
            started = sorted((t for t in svc.turns.values() if t.seq > after), key=lambda t: t.seq)
            return [_turn_view(svc, t) for t in started[:limit]]

    async def input(self, session: str, id: str) -> InputView | None:
        """The input ``id`` and its fate, or None if the session never had it."""
        with self._lock:
            svc = self._service.get(session)
            row = svc.inputs.get(id) if svc else None
            return _input_view(row) if row else None

    async def turn(self, session: str, id: str) -> TurnView | None:
        """The turn ``id`` (``queued`` while its prompt waits), or None if there is none."""
        with self._lock:
            svc = self._service.get(session)
            if svc is None:
                return None
            if id in svc.turns:
                return _turn_view(svc, svc.turns[id])
            row = svc.inputs.get(id)
            if row is not None and row.state == "waiting" and row.turn is None:
                return TurnView(id, "queued", seq=row.seq)
            return None

    async def transcript(self, session: str, *, after: int, limit: int) -> list[Entry]:
        """Up to ``limit`` messages at positions > ``after``, with the turn of each."""
        with self._lock:
            transcript, _ = self._transcript(session)
            times = self._times(session)
            svc = self._service.get(session)
            starts = [(t.start, t.id) for t in svc.turns.values()] if svc else []
            first = max(after + 1, 0)
            return [
                Entry(p, transcript[p], turn_of(p, starts), times[p])
                for p in range(first, min(len(transcript), first + limit))
            ]

    async def events(self, session: str, *, after: int, limit: int) -> list[ServiceEvent]:
        """Up to ``limit`` durable events with ids > ``after``, in id order."""
        with self._lock:
            svc = self._service.get(session)
            if svc is None:
                return []
            first = max(after - svc.forgotten, 0)
            return svc.events[first : first + limit]

    async def sessions(
        self, *, prefix: str, after: str | None, limit: int, state: SessionState | None = None
    ) -> list[SessionSummary]:
        """Up to ``limit`` sessions whose id starts with ``prefix`` and sorts after ``after``."""
        with self._lock:
            # a deleted session keeps its epoch here, and nothing else: it is not listed
            names = sorted(
                n for n, svc in self._service.items() if n.startswith(prefix) and svc.inputs
            )
            found: list[SessionSummary] = []
            for name in names:
                if after is not None and name <= after:
                    continue
                summary = _summary(name, self._service[name])
                if state is None or summary.state == state:
                    found.append(summary)
                if len(found) >= limit:
                    break
            return found
