"""The SQLite store's service writes: inputs, claims, steps, ends, stops, cancels, metadata.

The same verbs as the memory reference (:mod:`steerable.stores._memory_service`), each one
transaction on the store's worker thread. A write starts with ``BEGIN IMMEDIATE``: it holds
the file's write lock from its first read, so reading the session's row, checking its epoch
(fencing) and the conditions of an input, and writing are one atomic step for every process
sharing the file, and a write refused (``Fenced``, ``TranscriptConflict``, a duplicate id, a
refused condition) rolls back whole. The reads are in :mod:`steerable.stores._sqlite_views`,
the rows and the transaction in :mod:`steerable.stores._sqlite_rows`, the tables in
:mod:`steerable.stores._sqlite_schema`.

The clock is SQLite's own ``julianday('now')`` (read once per transaction, as Unix
seconds): the clock of the machine that holds the file, which is every process's, since a
SQLite file is shared on one machine only. SQLite has no notifications: the store gives no
hints and the engine polls (``stopping`` is cheap for that: :class:`StopPoll`).
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, cast

from steerable import codec
from steerable.errors import (
    Fenced,
    QueueFull,
    SessionNotIdle,
    TranscriptConflict,
    TurnMismatch,
)
from steerable.messages import Message
from steerable.service_store import (
    Accepted,
    Claim,
    Entry,
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
    TurnView,
    counts_as_step,
    known_length,
    message_event,
)
from steerable.stores import _sqlite_views as views
from steerable.stores._sqlite_rows import (
    INPUT,
    QUEUED,
    Svc,
    TurnRow,
    Tx,
    dumps_object,
    input_view,
    length,
    loads_object,
)
from steerable.stores._sqlite_views import StopPoll

__all__ = ["CLAIMABLE", "SQLiteServiceTables"]

_T = TypeVar("_T")
_Work = Callable[[sqlite3.Connection], _T]

CLAIMABLE = (
    "SELECT session FROM steerable_service WHERE (running IS NOT NULL OR queued > 0)"
    " AND expires <= ? ORDER BY expires LIMIT 1"
)
"""A scanning claim's pick: it reads only the partial index of the sessions with work (its
plan is tested), so its cost does not grow with the idle sessions."""

_WAITING = "session = ? AND state = 'waiting'"
"""Every waiting input (on the ``steerable_inputs_queue`` index)."""


def _fenced(tx: Tx, lease: Lease) -> TurnRow:
    """The running turn, if ``lease`` still holds the session; :class:`Fenced` if not."""
    svc = tx.load(lease.session)
    if not tx.found or svc.epoch != lease.epoch or svc.holder != lease.holder:
        raise Fenced(lease.session, lease.epoch, svc.epoch if tx.found else None)
    if svc.running is None:
        raise Fenced(lease.session, lease.epoch, svc.epoch)
    return tx.turn(svc.running)


_PROMPT = "kind, text, metadata, trace"
"""The columns :func:`_prompt` reads, in its order."""


def _prompt(id: str, row: tuple[Any, ...]) -> Input:
    """The input ``id`` as it was sent, from a row of :data:`_PROMPT`'s columns."""
    kind, text, metadata, trace = row
    return Input(kind, json.loads(text), id, loads_object(metadata), loads_object(trace))


def _first_queued(db: sqlite3.Connection, session: str) -> tuple[Any, ...] | None:
    """The id and seq of the input that waits first to be a turn, then :data:`_PROMPT`'s."""
    row = db.execute(
        f"SELECT id, seq, {_PROMPT} FROM steerable_inputs WHERE {QUEUED} ORDER BY seq LIMIT 1",
        (session,),
    ).fetchone()
    return cast(tuple[Any, ...] | None, row)


def _waiting(db: sqlite3.Connection, session: str, most: int | None = None) -> int:
    """How many inputs wait (counted up to ``most`` only, if given: a bounded read)."""
    (count,) = db.execute(
        f"SELECT COUNT(*) FROM (SELECT 1 FROM steerable_inputs WHERE {_WAITING} LIMIT ?)",
        (session, -1 if most is None else most),  # LIMIT -1: no limit
    ).fetchone()
    return cast(int, count)


def _free(db: sqlite3.Connection, session: str, turn: str) -> list[str]:
    """The waiting steers offered to ``turn`` become turns of their own, each in its place
    in the order (before anything sent after it); their ids, by seq."""
    rows = db.execute(
        "UPDATE steerable_inputs SET turn = NULL WHERE session = ? AND state = 'waiting'"
        " AND turn = ? RETURNING seq, id",
        (session, turn),
    ).fetchall()
    return [id for _, id in sorted(rows)]


# -- the writes, each one transaction --------------------------------------------------


def _enqueue(
    db: sqlite3.Connection,
    session: str,
    input: Input,
    if_idle: bool,
    expected_turn: str | None,
    max_waiting: int | None,
) -> Accepted:
    tx = Tx(db, write=True)
    seen = db.execute(
        "SELECT kind, seq, offered, ahead FROM steerable_inputs WHERE session = ? AND id = ?",
        (session, input.id),
    ).fetchone()
    if seen is not None:
        tx.rollback()
        kind, seq, offered, ahead = seen
        return Accepted(input.id, kind, seq, offered, ahead, duplicate=True)
    svc = tx.load(session)
    if if_idle:
        waiting = _waiting(db, session)
        if svc.running is not None or waiting:
            raise SessionNotIdle(session, svc.running, waiting)
    offered = _offer(tx) if input.kind == "steer" else None
    if expected_turn is not None and offered != expected_turn:
        raise TurnMismatch(session, expected_turn, offered)
    if max_waiting is not None and _waiting(db, session, max_waiting) >= max_waiting:
        raise QueueFull(session, max_waiting)
    ahead = 0 if offered else (svc.running is not None) + svc.queued
    svc.inputs += 1
    svc.queued += offered is None
    db.execute(
        "INSERT INTO steerable_inputs"
        " (session, seq, id, kind, text, offered, ahead, turn, at, metadata, trace)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            *(session, svc.inputs, input.id, input.kind, json.dumps(input.text)),
            *(offered, ahead, offered, tx.now),
            *(dumps_object(input.metadata), dumps_object(input.trace)),
        ),
    )
    tx.emit("input", offered, {"id": input.id, "kind": input.kind, "turn": offered})
    tx.commit()
    return Accepted(input.id, input.kind, svc.inputs, offered, ahead)


def _offer(tx: Tx) -> str | None:
    """The turn a steer arriving now is offered to (its count grown), or None.

    The running turn while it is not stopping and has been offered fewer than its cap; with
    no turn running, the turn of the head of the queue (its cap is counted at its claim).
    """
    svc = tx.svc
    if svc.running is not None:
        row = tx.db.execute(
            "UPDATE steerable_turns SET offered = offered + 1 WHERE session = ? AND id = ?"
            " AND stop_requested = 0 AND offered < cap RETURNING id",
            (tx.session, svc.running),
        ).fetchone()
        return None if row is None else cast(str, row[0])
    head = _first_queued(tx.db, tx.session) if svc.queued else None
    return None if head is None else head[0]


def _claimable(db: sqlite3.Connection, now: float) -> str | None:
    """A session with work and no live lease, through the partial index of those with work."""
    row = db.execute(CLAIMABLE, (now,)).fetchone()
    return None if row is None else cast(str, row[0])


def mark_of(db: sqlite3.Connection, session: str) -> str:
    """Inside a claim's write transaction: the transcript's mark, a new one if it has none
    (never had one, or a write forgot it: :data:`steerable.stores.sqlite.FORGET_MARK`)."""
    row = db.execute(
        "UPDATE steerable_service SET mark = lower(hex(randomblob(16)))"
        " WHERE session = ? AND mark IS NULL RETURNING mark",
        (session,),
    ).fetchone()
    if row is None:
        row = db.execute(
            "SELECT mark FROM steerable_service WHERE session = ?", (session,)
        ).fetchone()
    return cast(str, row[0])


def _claim(
    db: sqlite3.Connection,
    holder: str,
    seconds: float,
    cap: int,
    session: str | None,
    known: Mapping[str, Known] | None,
    first: bool = False,
) -> tuple[Claim, list[tuple[int, str, str]]] | None:
    tx = Tx(db, write=True)
    name = session if session is not None else _claimable(db, tx.now)
    svc = tx.load(name) if name is not None else Svc()
    live = svc.holder is not None and svc.expires > tx.now
    if not tx.found or live or (svc.running is None and svc.queued == 0):
        tx.rollback()
        return None
    svc.epoch += 1
    previous = svc.holder if svc.running is not None else None
    svc.holder, svc.expires = holder, tx.now + seconds
    stored = length(db, tx.session)
    mark = mark_of(db, tx.session)
    skip = known_length(known, tx.session, mark, stored)
    rows = db.execute(
        "SELECT position, id, body FROM steerable_messages WHERE session = ? AND position >= ?"
        " ORDER BY position",
        (tx.session, skip),
    ).fetchall()
    resumed = svc.running is not None
    if svc.running is None:
        turn, prompt = _start(tx, stored, cap)
    else:
        turn = tx.turn(svc.running)
        row = db.execute(
            f"SELECT {_PROMPT} FROM steerable_inputs WHERE session = ? AND id = ?",
            (tx.session, turn.id),
        ).fetchone()
        prompt = _prompt(turn.id, row)
        turn.epoch = svc.epoch
        tx.save_turn(turn)
        tx.emit("holder", turn.id, {"holder": holder, "epoch": svc.epoch})
    started = {"epoch": svc.epoch, "holder": holder, "resumed": resumed}
    tx.emit("turn_started", turn.id, started)
    taken = _first_step(tx, turn, prompt, stored) if first and not resumed else None
    tx.commit()
    lease = Lease(tx.session, holder, svc.epoch, svc.expires)
    claim = Claim(
        lease,
        turn.id,
        prompt,
        turn.start,
        [],
        resumed,
        turn.steps,
        turn.steers_taken,
        turn.cap,
        turn.stop_requested,
        previous,
        mark,
        skip,
        taken,
    )
    return claim, rows


def _first_step(tx: Tx, turn: TurnRow, prompt: Input, start: int) -> list[Message] | None:
    """A new turn's first step inside its claim's write transaction: the prompt's message at
    ``start``, then the steers offered to the turn; None (no step) if the prompt's id is a
    message of the transcript already."""
    if _recorded(tx.db, tx.session, [prompt.id]):
        return None
    message = prompt.message(steered=False)
    taken = _stepped(tx, turn, [message], [codec.encode(message)], start, turn.cap, False)
    tx.save_turn(turn)
    return taken


def _start(tx: Tx, start: int, cap: int) -> tuple[TurnRow, Input]:
    """Make the first queued input the prompt of a new running turn at ``start``.

    The turn starts at the database's clock, counting the steers offered to its prompt while
    it waited at the head of the queue (its first step takes them).
    """
    svc = tx.svc
    first = _first_queued(tx.db, tx.session)
    assert first is not None, f"session {tx.session!r} counts a queued input it lacks"
    id, seq = first[:2]
    tx.db.execute(
        "UPDATE steerable_inputs SET state = 'prompt', turn = id WHERE session = ? AND id = ?",
        (tx.session, id),
    )
    (offered,) = tx.db.execute(
        "SELECT COUNT(*) FROM steerable_inputs WHERE session = ? AND state = 'waiting'"
        " AND turn = ?",
        (tx.session, id),
    ).fetchone()
    svc.queued -= 1
    svc.running = id
    # ord: the claim's epoch
    turn = TurnRow(id, svc.epoch, start, cap, "running", svc.epoch, offered=offered, seq=seq)
    turn.started_at = tx.now
    tx.db.execute(
        "INSERT INTO steerable_turns"
        " (session, id, ord, start_position, cap, state, epoch, offered, seq, started_at)"
        " VALUES (?, ?, ?, ?, ?, 'running', ?, ?, ?, ?)",
        (tx.session, id, turn.ord, start, cap, svc.epoch, offered, seq, tx.now),
    )
    return turn, _prompt(id, first[2:])


def _renew(db: sqlite3.Connection, lease: Lease, seconds: float) -> Renewal:
    tx = Tx(db, write=True)
    turn = _fenced(tx, lease)
    tx.svc.expires = tx.now + seconds
    tx.commit()
    return Renewal(
        Lease(lease.session, lease.holder, lease.epoch, tx.svc.expires), turn.stop_requested
    )


def _step(
    db: sqlite3.Connection,
    lease: Lease,
    messages: Sequence[Message],
    bodies: list[str],
    at: int,
    take: int,
    final: bool,
) -> list[Message]:
    tx = Tx(db, write=True)
    turn = _fenced(tx, lease)
    taken = _stepped(tx, turn, messages, bodies, at, take, final)
    tx.save_turn(turn)
    tx.commit()
    return taken


def _stepped(
    tx: Tx,
    turn: TurnRow,
    messages: Sequence[Message],
    bodies: Sequence[str],
    at: int,
    take: int,
    final: bool,
) -> list[Message]:
    """A step's writes inside the fenced write transaction ``tx`` (not committed)."""
    db = tx.db
    end = length(db, tx.session)
    if at != end:
        raise TranscriptConflict(tx.session, at, end)
    step = counts_as_step(messages, take, final=final)
    turn.steps += step
    room = 0 if turn.stop_requested else max(0, min(take, turn.cap - turn.steers_taken))
    offered = _take(db, tx.session, turn, room)
    new_ids = {m.id for m in messages}
    recorded = _recorded(db, tx.session, [m.id for m in offered]) | new_ids
    taken = [m for m in offered if m.id not in recorded]  # recorded another way already
    rows = [(m.id, body) for m, body in zip(messages, bodies, strict=True)]
    rows += [(m.id, codec.encode(m)) for m in taken]
    db.executemany(
        "INSERT INTO steerable_messages (session, position, id, body, at) VALUES (?, ?, ?, ?, ?)",
        [(tx.session, end + i, id, body, tx.now) for i, (id, body) in enumerate(rows)],
    )
    for position, message in enumerate(messages, end):
        tx.emit("message", turn.id, message_event(message, position))
    if offered:
        tx.emit("steers_taken", turn.id, {"ids": [m.id for m in offered], "step": turn.steps})
    for position, message in enumerate(taken, end + len(messages)):
        tx.emit("message", turn.id, message_event(message, position))
    if step:
        tx.emit("step", turn.id, {"step": turn.steps, "length": end + len(rows)})
    return taken


def _take(db: sqlite3.Connection, session: str, turn: TurnRow, room: int) -> list[Message]:
    """Mark up to ``room`` of the steers offered to ``turn`` taken at its step, in order."""
    if room <= 0:
        return []
    rows = db.execute(
        "UPDATE steerable_inputs SET state = 'taken', step = ? WHERE session = ? AND seq IN"
        " (SELECT seq FROM steerable_inputs WHERE session = ? AND state = 'waiting'"
        " AND turn = ? ORDER BY seq LIMIT ?) RETURNING seq, id, kind, text",
        (turn.steps, session, session, turn.id, room),
    ).fetchall()
    rows.sort()
    turn.steers_taken += len(rows)
    return [Input(kind, json.loads(text), id).message(steered=True) for _, id, kind, text in rows]


def _recorded(db: sqlite3.Connection, session: str, ids: list[str]) -> set[str]:
    """Which of ``ids`` are messages of the transcript already (through the id index)."""
    if not ids:
        return set()
    marks = ",".join("?" * len(ids))
    rows = db.execute(
        f"SELECT id FROM steerable_messages WHERE session = ? AND id IN ({marks})",
        (session, *ids),
    )
    return {id for (id,) in rows}


def _end_turn(
    db: sqlite3.Connection,
    lease: Lease,
    outcome: Outcome,
    last: Sequence[Message] = (),
    bodies: Sequence[str] = (),
    at: int | None = None,
) -> str | None:
    tx = Tx(db, write=True)
    turn = _fenced(tx, lease)
    if last:  # the turn's last save, in the same transaction
        assert at is not None, "end_turn(last=...) needs at="
        _stepped(tx, turn, last, bodies, at, 0, True)
    turn.state, turn.text, turn.error = outcome.state, outcome.text, outcome.error
    turn.usage, turn.ended_at = dict(outcome.usage), tx.now
    turn.end = length(db, tx.session)
    tx.save_turn(turn)
    released = _free(db, tx.session, turn.id)  # the steers it never took
    svc = tx.svc
    svc.queued += len(released)
    svc.running, svc.holder, svc.expires = None, None, 0.0
    tx.emit("turn_ended", turn.id, {"state": outcome.state, "released": released})
    following = _first_queued(db, tx.session)
    tx.commit()
    return None if following is None else following[0]


def _stop(db: sqlite3.Connection, session: str) -> str | None:
    tx = Tx(db, write=True)
    svc = tx.load(session)
    if svc.running is None:
        tx.rollback()
        return None
    turn = tx.turn(svc.running)
    if not turn.stop_requested:
        turn.stop_requested = True
        tx.save_turn(turn)
        tx.emit("stop", turn.id, {})
    tx.commit()
    return turn.id


def _cancel(db: sqlite3.Connection, session: str, id: str) -> InputView | None:
    """A waiting input becomes ``cancelled``; the head's offered steers go free with it.

    A steer offered to the running turn stays counted against its cap (as the reference).
    """
    tx = Tx(db, write=True)
    row = db.execute(
        f"SELECT {INPUT} FROM steerable_inputs WHERE session = ? AND id = ?", (session, id)
    ).fetchone()
    if row is None or row[4] != "waiting":
        tx.rollback()
        return None if row is None else input_view(row)
    was: str | None = row[5]
    svc = tx.load(session)
    released: list[str] = []
    if was is None:
        svc.queued -= 1
        if svc.running is None:  # the head: the steers offered to it are turns of their own
            released = _free(db, session, id)
            svc.queued += len(released)
    db.execute(
        "UPDATE steerable_inputs SET state = 'cancelled', turn = NULL WHERE session = ? AND id = ?",
        (session, id),
    )
    tx.emit("cancelled", was, {"id": id, "released": released})
    tx.commit()
    return input_view((*row[:4], "cancelled", None, *row[6:]))


def _set_metadata(db: sqlite3.Connection, session: str, metadata: dict[str, Any]) -> None:
    db.execute(  # one statement: atomic on its own; a new row is an idle session with no input
        "INSERT INTO steerable_service (session, metadata) VALUES (?, ?)"
        " ON CONFLICT (session) DO UPDATE SET metadata = excluded.metadata",
        (session, dumps_object(metadata)),
    )


class SQLiteServiceTables:
    """The :class:`steerable.service_store.ServiceStore` verbs of :class:`SQLiteStore`."""

    # provided by SQLiteStore: run ``work`` on the worker thread, errors translated
    async def _call(self, work: _Work[_T]) -> _T:
        raise NotImplementedError

    # provided by SQLiteStore: a short write, on the loop's thread when it can finish at
    # once (:mod:`steerable.stores._sqlite_connections`), else as ``_call``
    async def _write(self, work: _Work[_T], size: int = 0) -> _T:
        raise NotImplementedError

    _stop_poll: StopPoll  # set by SQLiteStore

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
        size = len(json.dumps(input.text))  # the text is stored as JSON
        return await self._write(
            lambda db: _enqueue(db, session, input, if_idle, expected_turn, max_waiting), size
        )

    async def cancel(self, session: str, id: str) -> InputView | None:
        """Take back the waiting input ``id`` (it becomes ``cancelled``); its view after."""
        return await self._call(lambda db: _cancel(db, session, id))

    async def stopping(self, holder: str) -> list[str]:
        """The sessions ``holder`` holds whose running turn was asked to stop (cheap)."""
        return await self._call(lambda db: self._stop_poll.read(db, holder))

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
        new turn's first step with it if ``first``; the rows read in the write transaction
        are decoded after it commits."""
        claimed = await self._call(
            lambda db: _claim(db, holder, seconds, cap, session, known, first)
        )
        if claimed is None:
            return None
        claim, rows = claimed
        where = f"session {claim.lease.session!r}, position"
        messages = [codec.decode(i, b, where=f"{where} {p}") for p, i, b in rows]
        return dataclasses.replace(claim, messages=messages)

    async def renew(self, lease: Lease, *, seconds: float) -> Renewal:
        """Extend ``lease`` by ``seconds`` from now; :class:`Fenced` if it is stale."""
        return await self._write(lambda db: _renew(db, lease, seconds))

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
        bodies = [codec.encode(m) for m in messages]  # refused before the lock is taken
        size = sum(len(body) for body in bodies)
        return await self._write(
            lambda db: _step(db, lease, messages, bodies, at, take, final), size
        )

    async def end_turn(
        self,
        lease: Lease,
        outcome: Outcome,
        *,
        last: Sequence[Message] = (),
        at: int | None = None,
    ) -> str | None:
        """Record the turn's end and release the lease; the next turn's prompt id, if any
        (``last``: saved at ``at`` first, in the same write transaction)."""
        bodies = [codec.encode(m) for m in last]  # refused before the lock is taken
        size = sum(len(body) for body in bodies)
        return await self._write(lambda db: _end_turn(db, lease, outcome, last, bodies, at), size)

    async def stop(self, session: str) -> str | None:
        """Ask the running turn to stop; its id, or None when no turn runs."""
        return await self._call(lambda db: _stop(db, session))

    async def set_metadata(self, session: str, metadata: dict[str, Any]) -> None:
        """Replace the session's metadata (the session need not have had an input)."""
        await self._call(lambda db: _set_metadata(db, session, metadata))

    async def status(self, session: str, *, limit: int = 100) -> Status:
        """The session's running turn, its first ``limit`` waiting inputs, and the counts."""
        return await self._call(lambda db: views.status(db, session, limit))

    async def inputs(
        self, session: str, *, after: int, limit: int, state: InputState | None = None
    ) -> list[InputView]:
        """Up to ``limit`` inputs with ``seq`` > ``after`` in order (only ``state``, if given)."""
        return await self._call(lambda db: views.inputs(db, session, after, limit, state))

    async def turns(self, session: str, *, after: int, limit: int) -> list[TurnView]:
        """Up to ``limit`` turns that started (running or ended), prompt ``seq`` > ``after``."""
        return await self._call(lambda db: views.turns(db, session, after, limit))

    async def input(self, session: str, id: str) -> InputView | None:
        """The input ``id`` and its fate, or None if the session never had it."""
        return await self._call(lambda db: views.input(db, session, id))

    async def turn(self, session: str, id: str) -> TurnView | None:
        """The turn ``id`` (``queued`` while its prompt waits), or None if there is none."""
        return await self._call(lambda db: views.turn(db, session, id))

    async def transcript(self, session: str, *, after: int, limit: int) -> list[Entry]:
        """Up to ``limit`` messages at positions > ``after`` (-1: from the start), with turns."""
        return await self._call(lambda db: views.transcript(db, session, after, limit))

    async def events(self, session: str, *, after: int, limit: int) -> list[ServiceEvent]:
        """Up to ``limit`` durable events with ids > ``after``, in id order."""
        return await self._call(lambda db: views.events(db, session, after, limit))

    async def sessions(
        self, *, prefix: str, after: str | None, limit: int, state: SessionState | None = None
    ) -> list[SessionSummary]:
        """Up to ``limit`` sessions whose id starts with ``prefix`` and sorts after ``after``."""
        return await self._call(lambda db: views.sessions(db, prefix, after, limit, state))
