"""The MySQL store's service writes: inputs in, turns claimed, stepped and ended (schema 2, 3).

Each write is one transaction of :mod:`._transaction`, under the session's service row
lock (fencing is checked under it, a refusal rolls back whole); the step is one CALL of
the schema's ``steerable_step_v2`` (step 7's), which does the same server side and also
takes the core's lock, so the service's saves and the core's never interleave. An end that
carries the turn's last save (``end_turn(last=..., at=...)``) appends it in the end's own
transaction, under the service row lock that fences the end and then the core's lock, in
one ``INSERT ... SELECT`` that inserts only at the transcript's length: the same statements
a step and an end send apart, in one transaction instead of two (the procedure commits
itself, so it cannot share one). The reads are :mod:`._views`'.

Times are the server's clock, read in the transaction (UTC seconds since the Unix epoch,
as exact decimals); a lease is live while its expiry is later than that clock. MySQL has
no notifications: the store gives no hints, and the service polls (``stopping`` is its
cheap read for stops).

Where a steer goes (the contract's rule): to the running turn while it runs, is not
stopping and was offered fewer than its cap; with no turn running, to the first input
waiting to be a turn (the head of the queue), uncapped, and the claim that starts it
counts those steers as offered to it. An input's ``turn`` column holds where it went.

A claim with ``first`` makes a new turn's first step in its own transaction, with
statements of its own rather than the step procedure (which commits itself): the core's
lock right after the service row's, then the step's writes as the procedure makes them,
the messages with the end's statement and the events with the claim's. With no steer
offered to the turn that is two statements more than the claim (the core's lock and the
insert: whether the prompt is stored is read with the prompt, the turn's counts are set
with the service row's), two more to take steers, and one transaction fewer than a claim
and a step.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from steerable import codec
from steerable.errors import (
    QueueFull,
    SessionNotIdle,
    StoreUnavailable,
    TranscriptConflict,
    TurnMismatch,
    UsageError,
)
from steerable.messages import Message
from steerable.service_store import (
    Accepted,
    Claim,
    EventKind,
    Input,
    InputView,
    Known,
    Lease,
    Outcome,
    Renewal,
    counts_as_step,
    known_length,
    message_event,
)
from steerable.stores.mysql._driver import MAX_AT, check_id, text_of
from steerable.stores.mysql._rows import (
    INPUT,
    ServiceRow,
    TurnRow,
    input_view,
    object_text,
)
from steerable.stores.mysql._schema import NOW, STEP
from steerable.stores.mysql._transaction import (
    CORE_LOCK,
    LENGTH,
    Transactions,
    Tx,
    fenced,
    length_of,
    locked,
    turn_of,
    waiting_of,
)

__all__ = ["MySQLServiceTables"]

_MAKE = (
    "INSERT INTO steerable_service (session) VALUES (%s) ON DUPLICATE KEY UPDATE session = session"
)
_HEAD = (
    "SELECT seq, id FROM steerable_inputs WHERE session = %s AND state = 'waiting'"
    " AND turn IS NULL ORDER BY seq LIMIT 1"
)
_OFFERED = (
    "SELECT id FROM steerable_inputs WHERE session = %s AND state = 'waiting' AND turn = %s"
    " ORDER BY seq"
)
_FREE = (
    "UPDATE steerable_inputs SET turn = NULL WHERE session = %s AND state = 'waiting' AND turn = %s"
)


class MySQLServiceTables(Transactions):
    """The :class:`steerable.service_store.ServiceStore` writes of :class:`MySQLStore`."""

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

        The conditions are checked under the session's lock; a refusal rolls back whole
        (the session's row too, when this enqueue made it).
        """
        check_id(session, "session id")
        check_id(input.id, "input id")
        conditions = _Conditions(if_idle, expected_turn, max_waiting)

        async def work(tx: Tx) -> Accepted:
            await tx.run(_MAKE, (session,))
            svc = await locked(tx, session)
            if svc is None:  # made just above, in this transaction
                raise StoreUnavailable(f"session {session!r}: its service row is missing")
            seen = await tx.rows(
                "SELECT kind, seq, offered, ahead FROM steerable_inputs"
                " WHERE session = %s AND id = %s",
                (session, input.id),
            )
            if seen:
                kind, seq, first, ahead = seen[0]
                turn = None if first is None else text_of(first)
                return Accepted(input.id, text_of(kind), int(seq), turn, int(ahead), True)  # type: ignore[arg-type]
            return await _enqueue(tx, session, svc, input, conditions)

        return await self._atomic(session, work)

    async def cancel(self, session: str, id: str) -> InputView | None:
        """Take back the waiting input ``id`` (it becomes ``cancelled``); its view after.

        Under the session's lock, as a claim and a step are: exactly one of them has it.
        """
        check_id(session, "session id")
        if len(id) > 255:
            return None  # no stored id is that long

        async def work(tx: Tx) -> InputView | None:
            svc = await locked(tx, session)
            rows = await tx.rows(f"{INPUT} WHERE session = %s AND id = %s", (session, id))
            if svc is None or not rows:
                return None
            view = input_view(rows[0])
            if view.state != "waiting":
                return view
            released: list[str] = []
            if view.turn is None and svc.running is None:  # the head: its steers go free
                released = [text_of(r[0]) for r in await tx.rows(_OFFERED, (session, id))]
                await tx.run(_FREE, (session, id))
            await tx.run(
                "UPDATE steerable_inputs SET state = 'cancelled', turn = NULL"
                " WHERE session = %s AND seq = %s",
                (session, view.seq),
            )
            data = {"id": id, "released": released}
            await tx.emit(session, svc.events, [("cancelled", view.turn, data)])
            queued = len(released) - (view.turn is None)
            await tx.run(
                "UPDATE steerable_service SET queued = queued + %s, events = events + 1"
                " WHERE session = %s",
                (queued, session),
            )
            return replace(view, state="cancelled", turn=None)

        return await self._atomic(session, work)

    async def set_metadata(self, session: str, metadata: dict[str, Any]) -> None:
        """Replace the session's metadata; one statement, making the session's row if need be."""
        check_id(session, "session id")
        text = object_text(metadata)
        await self._check_once()
        await self._run(
            "INSERT INTO steerable_service (session, metadata) VALUES (%s, %s)"
            " ON DUPLICATE KEY UPDATE metadata = %s",
            (session, text, text),
            session=session,
        )

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
        new turn's first step in the claim's transaction if ``first`` (see :func:`_first`)."""
        check_id(holder, "holder id")
        if session is not None:
            check_id(session, "session id")

        async def work(tx: Tx) -> Claim | None:
            name = session
            if name is None:
                # a session being written to is skipped, not waited for: another claimer
                # has it, or the poll comes back to it
                scan = f"SELECT session FROM steerable_service WHERE claimable <= {NOW}"
                rows = await tx.rows(scan + " ORDER BY claimable LIMIT 1 FOR UPDATE SKIP LOCKED")
                if not rows:
                    # SKIP LOCKED also skips a row that a view holds in share mode for a
                    # moment: a plain read finds it, and the lock below waits for the view
                    rows = await tx.rows(scan + " ORDER BY claimable LIMIT 1")
                    # that read took the snapshot (REPEATABLE READ) before the lock below:
                    # begin again, so the reads after it see what the lock's holder wrote
                    await tx.restart()
                if not rows:
                    return None
                name = text_of(rows[0][0])
            svc = await locked(tx, name)
            if svc is None or svc.live or (svc.running is None and svc.queued == 0):
                return None
            return await _claim(tx, name, svc, holder, seconds, cap, known, first)

        return await self._atomic(session or "", work)

    async def renew(self, lease: Lease, *, seconds: float) -> Renewal:
        """Extend ``lease`` by ``seconds`` from now; :class:`Fenced` if it is stale."""

        async def work(tx: Tx) -> Renewal:
            svc, turn = await fenced(tx, lease)
            expires = svc.until(seconds)
            await tx.run(
                "UPDATE steerable_service SET expires = %s WHERE session = %s",
                (expires, lease.session),
            )
            new = Lease(lease.session, lease.holder, lease.epoch, float(expires))
            return Renewal(new, turn.stop_requested)

        return await self._atomic(lease.session, work)

    async def step(
        self,
        lease: Lease,
        messages: Sequence[Message],
        *,
        at: int,
        take: int,
        final: bool = False,
    ) -> list[Message]:
        """The turn's save-and-take, fenced by ``lease``; returns the steered messages taken.

        One CALL of the step procedure (see :mod:`._schema`), one round trip, steered or not.
        """
        check_id(lease.session, "session id")
        for message in messages:
            check_id(message.id, "message id")
        batch = [
            [m.id, codec.encode(m), json.dumps(message_event(m, at + n), separators=(",", ":"))]
            for n, m in enumerate(messages)
        ]
        await self._check_once()
        args = (
            lease.session,
            lease.holder,
            lease.epoch,
            min(at, MAX_AT),
            min(max(take, 0), MAX_AT),
            counts_as_step(messages, take, final=final),
            json.dumps(batch, ensure_ascii=False, separators=(",", ":")),
        )
        call = f"CALL {STEP}(%s, %s, %s, %s, %s, %s, %s)"
        rows = await self._run(call, args, session=lease.session, at=at)
        where = f"a steer taken in session {lease.session!r}"
        return [codec.decode(text_of(id), body, where=where) for id, body in rows]

    async def end_turn(
        self,
        lease: Lease,
        outcome: Outcome,
        *,
        last: Sequence[Message] = (),
        at: int | None = None,
    ) -> str | None:
        """Record the turn's end and release the lease; the next turn's prompt id, if any.

        ``last`` (saved at ``at`` first) is appended in the end's transaction, under the
        lock it takes to fence the lease: one statement more than an end without it (the
        core's lock; the conditional insert stands in for the end's read of the length).
        """
        usage = object_text(outcome.usage)
        saved = _Last.of(lease.session, last, at) if last else None

        async def work(tx: Tx) -> str | None:
            svc, turn = await fenced(tx, lease)
            if saved is None:
                end = await length_of(tx, lease.session)
                return await _end(tx, lease.session, svc, turn, outcome, usage, end)
            await saved.append(tx)
            events = saved.events(turn.id)
            return await _end(tx, lease.session, svc, turn, outcome, usage, saved.end, events)

        return await self._atomic(lease.session, work, at=at)

    async def stop(self, session: str) -> str | None:
        """Ask the running turn to stop; its id, or None when no turn runs."""
        check_id(session, "session id")

        async def work(tx: Tx) -> str | None:
            svc = await locked(tx, session)
            turn = None if svc is None or svc.running is None else svc.running
            if svc is None or turn is None:
                return None
            changed = await tx.run(
                "UPDATE steerable_turns SET stop_requested = TRUE"
                " WHERE session = %s AND id = %s AND NOT stop_requested",
                (session, turn),
            )
            if changed:
                await tx.emit(session, svc.events, [("stop", turn, {})])
                await tx.run(
                    "UPDATE steerable_service SET events = events + 1 WHERE session = %s",
                    (session,),
                )
            return turn

        return await self._atomic(session, work)


# -- the writes' work, inside their transaction ----------------------------------------------


@dataclass(frozen=True, slots=True)
class _Conditions:
    """An enqueue's conditions (see :meth:`MySQLServiceTables.enqueue`)."""

    if_idle: bool
    expected_turn: str | None
    max_waiting: int | None


@dataclass(frozen=True, slots=True)
class _Last:
    """The turn's last save, given to its end: the messages to append at ``at``, as a
    final step (no step counted, no steer taken) appends them."""

    session: str
    at: int
    ids: list[str]
    bodies: list[str]
    data: list[dict[str, Any]]

    @staticmethod
    def of(session: str, messages: Sequence[Message], at: int | None) -> _Last:
        if at is None:
            raise UsageError("end_turn(last=...) needs at=, the length the messages follow")
        check_id(session, "session id")
        for message in messages:
            check_id(message.id, "message id")
        return _Last(
            session,
            at,
            [m.id for m in messages],
            [codec.encode(m) for m in messages],
            [message_event(m, at + n) for n, m in enumerate(messages)],
        )

    @property
    def end(self) -> int:
        """The transcript's length after the save."""
        return self.at + len(self.ids)

    async def append(self, tx: Tx, *, core_locked: bool = False) -> None:
        """Append the messages under the core's lock (taken after the service row's, as
        the step procedure does, unless ``core_locked``: the transaction holds it already);
        :class:`TranscriptConflict` unless ``at`` is the length, :class:`InvalidMessage`
        (the messages' unique key) for an id stored already.

        One ``INSERT ... SELECT`` that inserts only if the transcript's length is ``at``:
        the length is read again only to say why it did not.
        """
        if not core_locked:
            await tx.run(CORE_LOCK, (self.session,))
        # the time is the column's default, as the step procedure's insert takes it
        rows = " UNION ALL ".join(["SELECT %s, %s, %s, %s"] * len(self.ids))
        args: list[object] = [
            value
            for n, (id, body) in enumerate(zip(self.ids, self.bodies, strict=True))
            for value in (self.session, self.at + n, id, body)
        ]
        inserted = await tx.run(
            "INSERT INTO steerable_messages (session, position, id, body)"
            f" SELECT * FROM ({rows}) AS m WHERE ({LENGTH}) = %s",
            [*args, self.session, self.at],
        )
        if inserted != len(self.ids):
            raise TranscriptConflict(self.session, self.at, await length_of(tx, self.session))

    def events(self, turn: str) -> list[tuple[EventKind, str | None, Any]]:
        """The messages' ``message`` events, as the step procedure writes them."""
        return [("message", turn, data) for data in self.data]


async def _end(
    tx: Tx,
    session: str,
    svc: ServiceRow,
    turn: TurnRow,
    outcome: Outcome,
    usage: str | None,
    end: int,
    events: Sequence[tuple[EventKind, str | None, Any]] = (),
) -> str | None:
    """End ``turn`` (fenced, locked) at ``end`` after ``events``; the next prompt's id."""
    error = None if outcome.error is None else json.dumps(outcome.error)
    await tx.run(
        "UPDATE steerable_turns SET state = %s, answer = %s, error = %s,"
        f" end_position = %s, token_usage = %s, ended_at = {NOW}"
        " WHERE session = %s AND id = %s",
        (outcome.state, json.dumps(outcome.text), error, end, usage, session, turn.id),
    )
    # the steers offered and never taken: each a turn of its own, in its place
    released = [text_of(r[0]) for r in await tx.rows(_OFFERED, (session, turn.id))]
    await tx.run(_FREE, (session, turn.id))
    data = {"state": outcome.state, "released": released}
    written = [*events, ("turn_ended", turn.id, data)]
    await tx.emit(session, svc.events, written)
    await tx.run(
        "UPDATE steerable_service SET running = NULL, holder = NULL, expires = NULL,"
        " queued = queued + %s, events = events + %s WHERE session = %s",
        (len(released), len(written), session),
    )
    following = await tx.rows(_HEAD, (session,))
    return text_of(following[0][1]) if following else None


async def _target(tx: Tx, session: str, svc: ServiceRow, running: TurnRow | None) -> str | None:
    """The turn a steer arriving now is offered to (None: it is a turn of its own)."""
    if running is not None:
        if running.stop_requested or running.offered >= running.cap:
            return None
        return running.id
    if svc.queued == 0:
        return None
    head = await tx.rows(_HEAD, (session,))
    return text_of(head[0][1]) if head else None


async def _check(
    tx: Tx, session: str, svc: ServiceRow, offered: str | None, conditions: _Conditions
) -> None:
    """Refuse the enqueue whole if a condition fails, in the contract's order."""
    if conditions.if_idle and (svc.running is not None or await waiting_of(tx, session, 1)):
        raise SessionNotIdle(session, svc.running, await waiting_of(tx, session))
    expected = conditions.expected_turn
    if expected is not None and offered != expected:
        raise TurnMismatch(session, expected, offered)
    bound = conditions.max_waiting
    if bound is not None and await waiting_of(tx, session, max(bound, 0)) >= bound:
        raise QueueFull(session, bound)


async def _enqueue(
    tx: Tx, session: str, svc: ServiceRow, input: Input, conditions: _Conditions
) -> Accepted:
    running = None if svc.running is None else await turn_of(tx, session, svc.running)
    offered = await _target(tx, session, svc, running) if input.kind == "steer" else None
    await _check(tx, session, svc, offered, conditions)
    if running is not None and offered == running.id:
        await tx.run(
            "UPDATE steerable_turns SET offered = offered + 1 WHERE session = %s AND id = %s",
            (session, offered),
        )
    ahead = 0 if offered else (running is not None) + svc.queued
    # a steer's message, ready for the step procedure to copy when it takes it
    body = codec.encode(input.message(steered=True)) if input.kind == "steer" else None
    seq = svc.inputs + 1
    await tx.run(
        "INSERT INTO steerable_inputs (session, seq, id, kind, text, body, offered, ahead,"
        f" state, turn, metadata, trace, at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s,"
        f" 'waiting', %s, %s, %s, {NOW})",
        (
            *(session, seq, input.id, input.kind, json.dumps(input.text), body),
            *(offered, ahead, offered, object_text(input.metadata), object_text(input.trace)),
        ),
    )
    data = {"id": input.id, "kind": input.kind, "turn": offered}
    await tx.emit(session, svc.events, [("input", offered, data)])
    await tx.run(
        "UPDATE steerable_service SET inputs = inputs + 1, events = events + 1,"
        " queued = queued + %s WHERE session = %s",
        (0 if offered else 1, session),
    )
    return Accepted(input.id, input.kind, seq, offered, ahead)


async def _start(tx: Tx, session: str, ord: int, start: int, cap: int, epoch: int) -> str:
    """Make the head of the queue the prompt of a new running turn; the turn's id.

    The steers offered to it while it waited count as offered to the turn.
    """
    seq, raw = (await tx.rows(_HEAD, (session,)))[0]  # the queued count says there is one
    id = text_of(raw)  # a str: aiomysql cannot send back the bytes it read
    await tx.run(
        "UPDATE steerable_inputs SET state = 'prompt', turn = id WHERE session = %s AND seq = %s",
        (session, seq),
    )
    counted = await tx.rows(
        "SELECT COUNT(*) FROM steerable_inputs WHERE session = %s AND state = 'waiting'"
        " AND turn = %s",
        (session, id),
    )
    offered = int(counted[0][0])
    await tx.run(
        "INSERT INTO steerable_turns (session, id, ord, start_position, cap, state, epoch,"
        f" offered, seq, started_at) VALUES (%s, %s, %s, %s, %s, 'running', %s, %s, %s, {NOW})",
        (session, id, ord, start, cap, epoch, offered, seq),
    )
    return id


async def _unknown(
    tx: Tx, session: str, mark: str, known: Mapping[str, Known] | None
) -> tuple[int, list[Message]]:
    """The messages of the transcript a claimer does not hold, and how many it does: those
    it read under ``mark`` (the row's, locked) if the transcript is at least that long.

    Only those messages are read and decoded; the length is read only when the claimer
    holds some under this mark. Under the service row's lock nothing cuts or changes the
    transcript (every such write takes it first), so what the claimer holds is its start.
    """
    held = None if known is None else known.get(session)
    skip = 0
    if held is not None and held.mark == mark:
        skip = known_length(known, session, mark, await length_of(tx, session))
    rows = await tx.rows(
        "SELECT position, id, body FROM steerable_messages WHERE session = %s AND position >= %s"
        " ORDER BY position",
        (session, skip),
    )
    return skip, [
        codec.decode(text_of(id), body, where=f"session {session!r}, position {position}")
        for position, id, body in rows
    ]


async def _claim(
    tx: Tx,
    session: str,
    svc: ServiceRow,
    holder: str,
    seconds: float,
    cap: int,
    known: Mapping[str, Known] | None,
    first: bool,
) -> Claim:
    epoch = svc.epoch + 1
    expires = svc.until(seconds)
    resumed = svc.running is not None
    stepping = first and not resumed
    if stepping:
        # the core's lock before the first plain read (as the step procedure takes it): no
        # save appends between the length read below, the turn's start, and the step at it
        await tx.run(CORE_LOCK, (session,))
    skip, messages = await _unknown(tx, session, svc.mark, known)
    events: list[tuple[EventKind, str | None, Any]] = []
    if svc.running is None:
        name = await _start(tx, session, svc.turns + 1, skip + len(messages), cap, epoch)
    else:
        name = svc.running
        events.append(("holder", name, {"holder": holder, "epoch": epoch}))
        await tx.run(
            "UPDATE steerable_turns SET epoch = %s WHERE session = %s AND id = %s",
            (epoch, session, name),
        )
    turn = await turn_of(tx, session, name)
    if turn is None:  # made or found just above, in this transaction
        raise StoreUnavailable(f"session {session!r}: the turn {name!r} is missing")
    prompt, stored = await _prompt(tx, session, name, stepping)
    events.append(("turn_started", name, {"epoch": epoch, "holder": holder, "resumed": resumed}))
    step = await _first(tx, session, turn, prompt) if stepping and not stored else None
    if step is not None:
        events += step.events
        turn = replace(turn, steps=turn.steps + 1, steers_taken=step.steers)
    await tx.emit(session, svc.events, events)
    claimed = (epoch, holder, expires, name, int(not resumed), int(not resumed), len(events))
    await _claimed(tx, session, name, claimed, step)
    return Claim(
        Lease(session, holder, epoch, float(expires)),
        name,
        prompt,
        turn.start,
        messages,
        resumed,
        turn.steps,
        turn.steers_taken,
        turn.cap,
        turn.stop_requested,
        svc.holder if resumed else None,  # the locked row's, before this claim wrote it
        svc.mark,
        skip,
        None if step is None else step.taken,
    )


_CLAIMED = (
    "s.epoch = %s, s.holder = %s, s.expires = %s, s.running = %s, s.queued = s.queued - %s,"
    " s.turns = s.turns + %s, s.events = s.events + %s"
)
"""What a claim sets on the session's service row (``s``)."""


async def _claimed(
    tx: Tx, session: str, turn: str, claimed: Sequence[object], step: _Step | None
) -> None:
    """Write the claim's values (:data:`_CLAIMED`'s) on the service row and, if it made
    ``turn``'s first ``step``, the step's counts on the turn in the same statement."""
    if step is None:
        await tx.run(
            f"UPDATE steerable_service AS s SET {_CLAIMED} WHERE s.session = %s",
            (*claimed, session),
        )
        return
    await tx.run(
        "UPDATE steerable_service AS s JOIN steerable_turns AS t ON t.session = s.session"
        f" AND t.id = %s SET {_CLAIMED}, t.steps = t.steps + 1, t.steers_taken = %s"
        " WHERE s.session = %s",
        (turn, *claimed, step.steers, session),
    )


_STORED = "SELECT EXISTS(SELECT 1 FROM steerable_messages WHERE session = %s AND id = %s)"
"""Whether the transcript holds a message of the id."""


async def _prompt(tx: Tx, session: str, turn: str, stepping: bool) -> tuple[Input, bool]:
    """The prompt of ``turn``, and (when ``stepping``: read with it, in one statement)
    whether its id is a message of the transcript already."""
    prompt = f"{INPUT} WHERE session = %s AND id = %s"
    if stepping:
        rows = await tx.rows(
            f"SELECT * FROM ({prompt}) AS p, ({_STORED} AS stored) AS s",
            (session, turn, session, turn),
        )
    else:
        rows = await tx.rows(prompt, (session, turn))
    row = rows[0]
    view = input_view(row[:10])
    stored = stepping and bool(row[10])
    return Input(view.kind, view.text, view.id, view.metadata, view.trace), stored


_TAKE = (
    "UPDATE steerable_inputs SET state = 'taken', step = 1 WHERE session = %s"
    " AND state = 'waiting' AND turn = %s ORDER BY seq LIMIT %s"
)
"""A new turn's first step takes the steers offered to it, in order (the step procedure's
take, with the step's number known: 1)."""

_TOOK = (
    "SELECT id, body, EXISTS(SELECT 1 FROM steerable_messages AS m"
    " WHERE m.session = i.session AND m.id = i.id) FROM steerable_inputs AS i"
    " WHERE session = %s AND state = 'taken' AND turn = %s AND step = 1 ORDER BY seq"
)
"""The steers the first step took, in order, each with whether the transcript holds its id
already (then it is taken but not recorded again, as the step procedure does)."""


@dataclass(frozen=True, slots=True)
class _Step:
    """What a new turn's first step made: the steered messages it recorded, how many steers
    it took (recorded or not: the claim adds them to the turn's counts with its step), and
    its events, in the step procedure's order."""

    taken: list[Message]
    steers: int
    events: list[tuple[EventKind, str | None, Any]]


async def _first(tx: Tx, session: str, turn: TurnRow, prompt: Input) -> _Step:
    """A new turn's first step in its claim's transaction, as ``step(lease, [prompt's
    message], at=start, take=cap)`` makes it right after the claim: the same rows, counts
    and events. The caller has seen that the transcript does not hold the prompt's id.

    The claim holds both locks and read the length under them, so the turn's start is the
    length: the messages go in with the end's statement (:meth:`_Last.append`) after the
    take, which runs only when steers were offered to the turn (its ``offered``).
    """
    room = min(turn.cap, turn.offered)  # a new turn has taken none, and no stop is asked
    took: list[tuple[Any, ...]] = []
    if room > 0 and await tx.run(_TAKE, (session, turn.id, room)):
        took = list(await tx.rows(_TOOK, (session, turn.id)))
    where = f"a steer taken in session {session!r}"
    taken = [codec.decode(text_of(id), body, where=where) for id, body, seen in took if not seen]
    saved = _Last.of(session, [prompt.message(steered=False), *taken], turn.start)
    await saved.append(tx, core_locked=True)
    messages = saved.events(turn.id)
    events = messages[:1]
    if took:
        events.append(("steers_taken", turn.id, {"ids": [text_of(r[0]) for r in took], "step": 1}))
    events += messages[1:]
    events.append(("step", turn.id, {"step": 1, "length": saved.end}))
    return _Step(taken, len(took), events)
