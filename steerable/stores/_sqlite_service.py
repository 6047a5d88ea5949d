"""The SQLite store's service tables: inputs, turns, the lease and events, in the store's file.

The same verbs as the memory reference (:mod:`steerable.stores._memory_service`), each one
transaction on the store's worker thread. A write starts with ``BEGIN IMMEDIATE``: it holds
the file's write lock from its first read, so reading the session's row, checking its epoch
(fencing) and writing are one atomic step for every process sharing the file, and a write
refused (``Fenced``, ``TranscriptConflict``, a duplicate id) rolls back whole.

The clock is SQLite's own ``julianday('now')`` (read once per transaction, as Unix
seconds): the clock of the machine that holds the file, which is every process's, since a
SQLite file is shared on one machine only. SQLite has no notifications: the store gives no
hints and the engine polls.

Texts a caller gives (an input's text, a turn's answer and error) are stored as JSON
strings, so NUL and lone surrogates come back as they went in; event data is JSON text.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from steerable import codec
from steerable.errors import Fenced, TranscriptConflict
from steerable.messages import Message
from steerable.service_store import (
    Accepted,
    Claim,
    Entry,
    EventKind,
    Input,
    InputKind,
    InputView,
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
    listing,
    message_event,
    turn_of,
)

__all__ = ["SERVICE_TABLES", "SQLiteServiceTables"]

# Version 2 of the file's schema. ``expires`` is 0 whenever nobody holds the session, so
# "no live lease" is ``expires <= now``; the partial index holds only the sessions with
# work (a running turn or a queued input), so a claim of any session never reads the idle
# ones. No statement or comment here may hold a semicolon: the opener splits on them.
SERVICE_TABLES = """
CREATE TABLE IF NOT EXISTS steerable_service (
    session TEXT    PRIMARY KEY,
    epoch   INTEGER NOT NULL DEFAULT 0,
    holder  TEXT,
    expires REAL    NOT NULL DEFAULT 0,
    running TEXT,
    inputs  INTEGER NOT NULL DEFAULT 0,
    queued  INTEGER NOT NULL DEFAULT 0,
    events  INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS steerable_service_work ON steerable_service (expires)
    WHERE running IS NOT NULL OR queued > 0;
CREATE TABLE IF NOT EXISTS steerable_inputs (
    session TEXT    NOT NULL,
    seq     INTEGER NOT NULL,
    id      TEXT    NOT NULL,
    kind    TEXT    NOT NULL,
    text    TEXT    NOT NULL,
    offered TEXT,
    ahead   INTEGER NOT NULL,
    state   TEXT    NOT NULL DEFAULT 'waiting',
    turn    TEXT,
    step    INTEGER,
    PRIMARY KEY (session, seq),
    UNIQUE (session, id)
);
CREATE INDEX IF NOT EXISTS steerable_inputs_waiting ON steerable_inputs (session, turn, seq)
    WHERE state = 'waiting';
CREATE TABLE IF NOT EXISTS steerable_turns (
    session        TEXT    NOT NULL,
    id             TEXT    NOT NULL,
    ord            INTEGER NOT NULL,
    start_position INTEGER NOT NULL,
    cap            INTEGER NOT NULL,
    state          TEXT    NOT NULL,
    epoch          INTEGER NOT NULL,
    steps          INTEGER NOT NULL DEFAULT 0,
    steers_taken   INTEGER NOT NULL DEFAULT 0,
    offered        INTEGER NOT NULL DEFAULT 0,
    stop_requested INTEGER NOT NULL DEFAULT 0,
    end_position   INTEGER,
    text           TEXT    NOT NULL DEFAULT '""',
    error          TEXT,
    PRIMARY KEY (session, id)
);
CREATE INDEX IF NOT EXISTS steerable_turns_start
    ON steerable_turns (session, start_position, ord);
CREATE TABLE IF NOT EXISTS steerable_events (
    session TEXT    NOT NULL,
    id      INTEGER NOT NULL,
    kind    TEXT    NOT NULL,
    turn    TEXT,
    data    TEXT    NOT NULL,
    at      REAL    NOT NULL,
    PRIMARY KEY (session, id)
)
"""

_T = TypeVar("_T")
_Work = Callable[[sqlite3.Connection], _T]

_NOW = "SELECT (julianday('now') - 2440587.5) * 86400.0"
_SVC = "epoch, holder, expires, running, inputs, queued, events"
_TURN = (
    "id, ord, start_position, cap, state, epoch, steps, steers_taken, offered,"
    " stop_requested, end_position, text, error"
)
_INPUT = "id, kind, text, seq, state, turn, step"
_QUEUED = "session = ? AND state = 'waiting' AND turn IS NULL"

# The two statements whose cost must not grow with the file (their plans are tested): a
# scanning claim reads only the partial index of sessions with work, and a step finds the
# transcript's end on the position index.
CLAIMABLE = (
    "SELECT session FROM steerable_service WHERE (running IS NOT NULL OR queued > 0)"
    " AND expires <= ? ORDER BY expires LIMIT 1"
)
LENGTH = "SELECT COALESCE(MAX(position) + 1, 0) FROM steerable_messages WHERE session = ?"

# A listing's filter on the state, applied before its LIMIT (columns of the session's row).
_STATE_FILTER: dict[SessionState | None, str] = {
    None: "",
    "running": " AND s.running IS NOT NULL",
    "queued": " AND s.running IS NULL AND s.queued > 0",
    "idle": " AND s.running IS NULL AND s.queued = 0",
}


def listing_query(
    prefix: str, after: str | None, state: SessionState | None
) -> tuple[str, list[str]]:
    """The SELECT of a listing (its LIMIT the last parameter, left out) and its bounds.

    A range scan of the session rows' primary key (SQLite's BINARY order is the UTF-8
    bytes', so code-point order); the last event's time is one lookup on the events' key.
    """
    lower, included, upper = listing(prefix, after)
    where = f"s.session {'>=' if included else '>'} ?"
    args = [lower]
    if upper is not None:
        where += " AND s.session < ?"
        args.append(upper)
    sql = (
        "SELECT s.session, s.running, s.queued, e.at FROM steerable_service AS s"
        " LEFT JOIN steerable_events AS e ON e.session = s.session AND e.id = s.events"
        f" WHERE {where} AND s.inputs > 0{_STATE_FILTER[state]} ORDER BY s.session LIMIT ?"
    )
    return sql, args


@dataclass
class _Svc:
    """A session's row: the lease, the running turn and the counters."""

    epoch: int = 0
    holder: str | None = None
    expires: float = 0.0
    running: str | None = None
    inputs: int = 0  # the last input's seq
    queued: int = 0  # inputs waiting to be turns of their own
    events: int = 0  # the last event's id


@dataclass
class _Turn:
    id: str
    ord: int
    start: int
    cap: int
    state: TurnState
    epoch: int
    steps: int = 0
    steers_taken: int = 0
    offered: int = 0
    stop_requested: bool = False
    end: int | None = None
    text: str = ""
    error: str | None = None


class _Tx:
    """One transaction on one session's row, and the events it appends.

    A writer (``write=True``) takes the file's write lock at once; a reader reads one
    snapshot. Leave with :meth:`commit` or :meth:`rollback` (an exception rolls back).
    """

    def __init__(self, db: sqlite3.Connection, *, write: bool) -> None:
        db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        self.db = db
        (self.now,) = cast(tuple[float], db.execute(_NOW).fetchone())
        self.session = ""
        self.found = False
        self.svc = _Svc()
        self._events: list[tuple[str, int, str, str | None, str, float]] = []

    def load(self, session: str) -> _Svc:
        """Read the session's row (a fresh one if the session has none yet)."""
        self.session = session
        row = self.db.execute(
            f"SELECT {_SVC} FROM steerable_service WHERE session = ?", (session,)
        ).fetchone()
        self.found = row is not None
        self.svc = _Svc(*row) if row else _Svc()
        return self.svc

    def emit(self, kind: EventKind, turn: str | None, data: dict[str, Any]) -> None:
        """Append a durable event of the session, with the next id."""
        self.svc.events += 1
        self._events.append((self.session, self.svc.events, kind, turn, json.dumps(data), self.now))

    def turn(self, id: str) -> _Turn:
        """The session's turn ``id``, which exists."""
        turn = _turn(self.db, self.session, id)
        assert turn is not None, f"session {self.session!r} lost its turn {id!r}"
        return turn

    def save_turn(self, t: _Turn) -> None:
        """Write ``t``'s mutable columns back."""
        self.db.execute(
            "UPDATE steerable_turns SET state = ?, epoch = ?, steps = ?, steers_taken = ?,"
            " offered = ?, stop_requested = ?, end_position = ?, text = ?, error = ?"
            " WHERE session = ? AND id = ?",
            (
                *(t.state, t.epoch, t.steps, t.steers_taken, t.offered, t.stop_requested, t.end),
                *(json.dumps(t.text), _dumps(t.error), self.session, t.id),
            ),
        )

    def commit(self) -> None:
        """Write the session's row and the events back, and commit."""
        s = self.svc
        self.db.execute(
            f"INSERT INTO steerable_service (session, {_SVC}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (session) DO UPDATE SET epoch = excluded.epoch,"
            " holder = excluded.holder, expires = excluded.expires,"
            " running = excluded.running, inputs = excluded.inputs,"
            " queued = excluded.queued, events = excluded.events",
            (self.session, s.epoch, s.holder, s.expires, s.running, s.inputs, s.queued, s.events),
        )
        if self._events:
            self.db.executemany(
                "INSERT INTO steerable_events (session, id, kind, turn, data, at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                self._events,
            )
        self.db.execute("COMMIT")

    def rollback(self) -> None:
        """End the transaction, keeping nothing."""
        self.db.execute("ROLLBACK")

    def fenced(self, lease: Lease) -> _Turn:
        """The running turn, if ``lease`` still holds the session; :class:`Fenced` if not."""
        svc = self.load(lease.session)
        if not self.found or svc.epoch != lease.epoch or svc.holder != lease.holder:
            raise Fenced(lease.session, lease.epoch, svc.epoch if self.found else None)
        if svc.running is None:
            raise Fenced(lease.session, lease.epoch, svc.epoch)
        return self.turn(svc.running)


def _dumps(text: str | None) -> str | None:
    return None if text is None else json.dumps(text)


def _loads(text: str | None) -> str | None:
    return None if text is None else cast(str, json.loads(text))


def _turn(db: sqlite3.Connection, session: str, id: str) -> _Turn | None:
    row = db.execute(
        f"SELECT {_TURN} FROM steerable_turns WHERE session = ? AND id = ?", (session, id)
    ).fetchone()
    if row is None:
        return None
    id, ord, start, cap, state, epoch, steps, steers_taken, offered, stop, end, text, error = row
    turn = _Turn(id, ord, start, cap, state, epoch, steps, steers_taken, offered, bool(stop))
    turn.end, turn.text, turn.error = end, json.loads(text), _loads(error)
    return turn


def _length(db: sqlite3.Connection, session: str) -> int:
    """The transcript's length, from the position index (no transcript read)."""
    (length,) = db.execute(LENGTH, (session,)).fetchone()
    return cast(int, length)


def _first_queued(db: sqlite3.Connection, session: str) -> tuple[str, str, str] | None:
    """The id, kind and stored text of the input that waits first to be a turn."""
    row = db.execute(
        f"SELECT id, kind, text FROM steerable_inputs WHERE {_QUEUED} ORDER BY seq LIMIT 1",
        (session,),
    ).fetchone()
    return cast(tuple[str, str, str] | None, row)


def _input_view(row: tuple[Any, ...]) -> InputView:
    id, kind, text, seq, state, turn, step = row
    return InputView(id, kind, json.loads(text), seq, state, turn, step)


def _turn_view(svc: _Svc, turn: _Turn) -> TurnView:
    live = turn.id == svc.running
    return TurnView(
        turn.id,
        turn.state,
        holder=svc.holder if live else None,
        epoch=turn.epoch,
        lease_expires_at=svc.expires if live and svc.holder is not None else None,
        steps=turn.steps,
        steers_taken=turn.steers_taken,
        stop_requested=turn.stop_requested,
        start=turn.start,
        end=turn.end,
        text=turn.text,
        error=turn.error,
    )


# -- the writes, each one transaction --------------------------------------------------


def _enqueue(db: sqlite3.Connection, session: str, input: Input) -> Accepted:
    tx = _Tx(db, write=True)
    seen = db.execute(
        "SELECT kind, seq, offered, ahead FROM steerable_inputs WHERE session = ? AND id = ?",
        (session, input.id),
    ).fetchone()
    if seen is not None:
        tx.rollback()
        kind, seq, offered, ahead = seen
        return Accepted(input.id, kind, seq, offered, ahead, duplicate=True)
    svc = tx.load(session)
    offered = None
    if input.kind == "steer" and svc.running is not None:
        # offered while the turn is not stopping and has been offered fewer than its cap
        row = db.execute(
            "UPDATE steerable_turns SET offered = offered + 1 WHERE session = ? AND id = ?"
            " AND stop_requested = 0 AND offered < cap RETURNING id",
            (session, svc.running),
        ).fetchone()
        offered = None if row is None else cast(str, row[0])
    ahead = 0 if offered else (svc.running is not None) + svc.queued
    svc.inputs += 1
    svc.queued += offered is None
    db.execute(
        "INSERT INTO steerable_inputs (session, seq, id, kind, text, offered, ahead, turn)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (
            session,
            svc.inputs,
            input.id,
            input.kind,
            json.dumps(input.text),
            offered,
            ahead,
            offered,
        ),
    )
    tx.emit("input", offered, {"id": input.id, "kind": input.kind, "turn": offered})
    tx.commit()
    return Accepted(input.id, input.kind, svc.inputs, offered, ahead)


def _claimable(db: sqlite3.Connection, now: float) -> str | None:
    """A session with work and no live lease, through the partial index of those with work."""
    row = db.execute(CLAIMABLE, (now,)).fetchone()
    return None if row is None else cast(str, row[0])


def _claim(
    db: sqlite3.Connection, holder: str, seconds: float, cap: int, session: str | None
) -> Claim | None:
    tx = _Tx(db, write=True)
    name = session if session is not None else _claimable(db, tx.now)
    svc = tx.load(name) if name is not None else _Svc()
    live = svc.holder is not None and svc.expires > tx.now
    if not tx.found or live or (svc.running is None and svc.queued == 0):
        tx.rollback()
        return None
    svc.epoch += 1
    svc.holder, svc.expires = holder, tx.now + seconds
    rows = db.execute(
        "SELECT position, id, body FROM steerable_messages WHERE session = ? ORDER BY position",
        (tx.session,),
    ).fetchall()
    messages = [
        codec.decode(i, b, where=f"session {tx.session!r}, position {p}") for p, i, b in rows
    ]
    resumed = svc.running is not None
    if svc.running is None:
        turn, prompt = _start(tx, len(messages), cap)
    else:
        turn = tx.turn(svc.running)
        (kind, text) = db.execute(
            "SELECT kind, text FROM steerable_inputs WHERE session = ? AND id = ?",
            (tx.session, turn.id),
        ).fetchone()
        prompt = Input(kind, json.loads(text), turn.id)
        turn.epoch = svc.epoch
        tx.save_turn(turn)
        tx.emit("holder", turn.id, {"holder": holder, "epoch": svc.epoch})
    started = {"epoch": svc.epoch, "holder": holder, "resumed": resumed}
    tx.emit("turn_started", turn.id, started)
    tx.commit()
    lease = Lease(tx.session, holder, svc.epoch, svc.expires)
    return Claim(
        lease,
        turn.id,
        prompt,
        turn.start,
        messages,
        resumed,
        turn.steps,
        turn.steers_taken,
        turn.cap,
        turn.stop_requested,
    )


def _start(tx: _Tx, start: int, cap: int) -> tuple[_Turn, Input]:
    """Make the first queued input the prompt of a new running turn at ``start``."""
    svc = tx.svc
    first = _first_queued(tx.db, tx.session)
    assert first is not None, f"session {tx.session!r} counts a queued input it lacks"
    id, kind, text = first
    tx.db.execute(
        "UPDATE steerable_inputs SET state = 'prompt', turn = id WHERE session = ? AND id = ?",
        (tx.session, id),
    )
    svc.queued -= 1
    svc.running = id
    turn = _Turn(id, svc.epoch, start, cap, "running", svc.epoch)  # ord: the claim's epoch
    tx.db.execute(
        "INSERT INTO steerable_turns (session, id, ord, start_position, cap, state, epoch)"
        " VALUES (?, ?, ?, ?, ?, 'running', ?)",
        (tx.session, id, turn.ord, start, cap, svc.epoch),
    )
    return turn, Input(cast(InputKind, kind), json.loads(text), id)


def _renew(db: sqlite3.Connection, lease: Lease, seconds: float) -> Renewal:
    tx = _Tx(db, write=True)
    turn = tx.fenced(lease)
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
) -> list[Message]:
    tx = _Tx(db, write=True)
    turn = tx.fenced(lease)
    length = _length(db, tx.session)
    if at != length:
        raise TranscriptConflict(tx.session, at, length)
    step = counts_as_step(messages, take)
    turn.steps += step
    room = 0 if turn.stop_requested else max(0, min(take, turn.cap - turn.steers_taken))
    offered = _take(db, tx.session, turn, room)
    new_ids = {m.id for m in messages}
    recorded = _recorded(db, tx.session, [m.id for m in offered]) | new_ids
    taken = [m for m in offered if m.id not in recorded]  # recorded another way already
    rows = [(m.id, body) for m, body in zip(messages, bodies, strict=True)]
    rows += [(m.id, codec.encode(m)) for m in taken]
    db.executemany(
        "INSERT INTO steerable_messages (session, position, id, body) VALUES (?, ?, ?, ?)",
        [(tx.session, length + i, id, body) for i, (id, body) in enumerate(rows)],
    )
    for position, message in enumerate(messages, length):
        tx.emit("message", turn.id, message_event(message, position))
    if offered:
        tx.emit("steers_taken", turn.id, {"ids": [m.id for m in offered], "step": turn.steps})
    for position, message in enumerate(taken, length + len(messages)):
        tx.emit("message", turn.id, message_event(message, position))
    if step:
        tx.emit("step", turn.id, {"step": turn.steps, "length": length + len(rows)})
    tx.save_turn(turn)
    tx.commit()
    return taken


def _take(db: sqlite3.Connection, session: str, turn: _Turn, room: int) -> list[Message]:
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


def _end_turn(db: sqlite3.Connection, lease: Lease, outcome: Outcome) -> str | None:
    tx = _Tx(db, write=True)
    turn = tx.fenced(lease)
    turn.state, turn.text, turn.error = outcome.state, outcome.text, outcome.error
    turn.end = _length(db, tx.session)
    tx.save_turn(turn)
    freed = db.execute(  # the steers it never took: turns of their own, in their place
        "UPDATE steerable_inputs SET turn = NULL WHERE session = ? AND state = 'waiting'"
        " AND turn = ?",
        (tx.session, turn.id),
    ).rowcount
    svc = tx.svc
    svc.queued += freed
    svc.running, svc.holder, svc.expires = None, None, 0.0
    tx.emit("turn_ended", turn.id, {"state": outcome.state})
    following = _first_queued(db, tx.session)
    tx.commit()
    return None if following is None else following[0]


def _stop(db: sqlite3.Connection, session: str) -> str | None:
    tx = _Tx(db, write=True)
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


# -- the reads, each one snapshot -------------------------------------------------------


def _status(db: sqlite3.Connection, session: str) -> Status:
    tx = _Tx(db, write=False)
    svc = tx.load(session)
    running = _turn_view(svc, tx.turn(svc.running)) if svc.running else None
    rows = db.execute(
        f"SELECT {_INPUT} FROM steerable_inputs WHERE session = ? AND state = 'waiting'"
        " ORDER BY seq",
        (session,),
    ).fetchall()
    tx.rollback()
    return Status(session, running, [_input_view(r) for r in rows], svc.queued)


def _input(db: sqlite3.Connection, session: str, id: str) -> InputView | None:
    row = db.execute(
        f"SELECT {_INPUT} FROM steerable_inputs WHERE session = ? AND id = ?", (session, id)
    ).fetchone()
    return None if row is None else _input_view(row)


def _turn_of_session(db: sqlite3.Connection, session: str, id: str) -> TurnView | None:
    tx = _Tx(db, write=False)
    svc = tx.load(session)
    turn = _turn(db, session, id)
    queued = db.execute(
        f"SELECT 1 FROM steerable_inputs WHERE {_QUEUED} AND id = ?", (session, id)
    ).fetchone()
    tx.rollback()
    if turn is not None:
        return _turn_view(svc, turn)
    return TurnView(id, "queued") if queued else None


def _transcript(db: sqlite3.Connection, session: str, after: int, limit: int) -> list[Entry]:
    tx = _Tx(db, write=False)
    first = max(after + 1, 0)
    rows = db.execute(
        "SELECT position, id, body FROM steerable_messages WHERE session = ? AND position >= ?"
        " ORDER BY position LIMIT ?",
        (session, first, max(limit, 0)),
    ).fetchall()
    # the turns that own these positions: from the last one starting at or before the
    # first, to the last one starting at or before the last (not every turn of the session)
    starts: list[tuple[int, str]] = db.execute(
        "SELECT start_position, id FROM steerable_turns WHERE session = ?"
        " AND start_position <= ? AND start_position >= (SELECT COALESCE(MAX(start_position),"
        " 0) FROM steerable_turns WHERE session = ? AND start_position <= ?)"
        " ORDER BY start_position, ord",
        (session, rows[-1][0] if rows else -1, session, first),
    ).fetchall()
    tx.rollback()
    return [
        Entry(p, codec.decode(i, b, where=f"session {session!r}, position {p}"), turn_of(p, starts))
        for p, i, b in rows
    ]


def _events(db: sqlite3.Connection, session: str, after: int, limit: int) -> list[ServiceEvent]:
    rows = db.execute(
        "SELECT id, kind, turn, data, at FROM steerable_events WHERE session = ? AND id > ?"
        " ORDER BY id LIMIT ?",
        (session, max(after, 0), max(limit, 0)),
    ).fetchall()
    return [ServiceEvent(id, kind, turn, json.loads(data), at) for id, kind, turn, data, at in rows]


def _sessions(
    db: sqlite3.Connection, prefix: str, after: str | None, limit: int, state: SessionState | None
) -> list[SessionSummary]:
    sql, args = listing_query(prefix, after, state)
    rows = db.execute(sql, (*args, max(limit, 0))).fetchall()
    return [
        SessionSummary(
            session,
            "running" if running is not None else "queued" if queued else "idle",
            running,
            queued,
            float(at or 0.0),
        )
        for session, running, queued, at in rows
    ]


class SQLiteServiceTables:
    """The :class:`steerable.service_store.ServiceStore` verbs of :class:`SQLiteStore`."""

    # provided by SQLiteStore: run ``work`` on the worker thread, errors translated
    async def _call(self, work: _Work[_T]) -> _T:
        raise NotImplementedError

    async def enqueue(self, session: str, input: Input) -> Accepted:
        """Record ``input`` in the session's order of arrival; an id seen before is a no-op."""
        return await self._call(lambda db: _enqueue(db, session, input))

    async def claim(
        self, holder: str, *, seconds: float, cap: int, session: str | None = None
    ) -> Claim | None:
        """Claim one session with work and no live lease (``session`` only, if given)."""
        return await self._call(lambda db: _claim(db, holder, seconds, cap, session))

    async def renew(self, lease: Lease, *, seconds: float) -> Renewal:
        """Extend ``lease`` by ``seconds`` from now; :class:`Fenced` if it is stale."""
        return await self._call(lambda db: _renew(db, lease, seconds))

    async def step(
        self, lease: Lease, messages: Sequence[Message], *, at: int, take: int
    ) -> list[Message]:
        """The turn's save-and-take, fenced by ``lease``; returns the steered messages taken."""
        bodies = [codec.encode(m) for m in messages]  # refused before the lock is taken
        return await self._call(lambda db: _step(db, lease, messages, bodies, at, take))

    async def end_turn(self, lease: Lease, outcome: Outcome) -> str | None:
        """Record the turn's end and release the lease; the next turn's prompt id, if any."""
        return await self._call(lambda db: _end_turn(db, lease, outcome))

    async def stop(self, session: str) -> str | None:
        """Ask the running turn to stop; its id, or None when no turn runs."""
        return await self._call(lambda db: _stop(db, session))

    async def status(self, session: str) -> Status:
        """The session's running turn, waiting inputs and queue length."""
        return await self._call(lambda db: _status(db, session))

    async def input(self, session: str, id: str) -> InputView | None:
        """The input ``id`` and its fate, or None if the session never had it."""
        return await self._call(lambda db: _input(db, session, id))

    async def turn(self, session: str, id: str) -> TurnView | None:
        """The turn ``id`` (``queued`` while its prompt waits), or None if there is none."""
        return await self._call(lambda db: _turn_of_session(db, session, id))

    async def transcript(self, session: str, *, after: int, limit: int) -> list[Entry]:
        """Up to ``limit`` messages at positions > ``after`` (-1: from the start), with turns."""
        return await self._call(lambda db: _transcript(db, session, after, limit))

    async def events(self, session: str, *, after: int, limit: int) -> list[ServiceEvent]:
        """Up to ``limit`` durable events with ids > ``after``, in id order."""
        return await self._call(lambda db: _events(db, session, after, limit))

    async def sessions(
        self, *, prefix: str, after: str | None, limit: int, state: SessionState | None = None
    ) -> list[SessionSummary]:
        """Up to ``limit`` sessions whose id starts with ``prefix`` and sorts after ``after``."""
        return await self._call(lambda db: _sessions(db, prefix, after, limit, state))
