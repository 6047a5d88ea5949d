"""The SQLite store's service rows as Python values, and the transaction over one session.

Shared by the writes (:mod:`steerable.stores._sqlite_service`) and the reads
(:mod:`steerable.stores._sqlite_views`): the session's row (:class:`Svc`), a turn's row
(:class:`TurnRow`), the columns each read selects, and the conversions to the views.

Texts a caller gives (an input's text, a turn's answer and error) are stored as JSON
strings, so NUL and lone surrogates come back as they went in; event data, metadata, an
input's trace context and usage are JSON text (NULL for an empty object).
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from typing import Any, cast

from steerable.service_store import EventKind, InputView, TurnState, TurnView

CLOCK = "((julianday('now') - 2440587.5) * 86400.0)"
"""SQLite's clock as Unix seconds (the machine's: every process sharing a file is on it)."""
NOW = f"SELECT {CLOCK}"

SVC = "epoch, holder, expires, running, inputs, queued, events"
INPUT = "id, kind, text, seq, state, turn, step, at, metadata, trace"
"""The columns :func:`input_view` reads, in its order."""
QUEUED = "session = ? AND state = 'waiting' AND turn IS NULL"
"""The inputs waiting to be turns of their own (on the ``steerable_inputs_waiting`` index)."""
_TURN = (
    "id, ord, start_position, cap, state, epoch, steps, steers_taken, offered,"
    " stop_requested, end_position, text, error, seq, started_at, ended_at, usage"
)

LENGTH = "SELECT COALESCE(MAX(position) + 1, 0) FROM steerable_messages WHERE session = ?"
"""A transcript's length, from the position index (no transcript read; its plan is tested)."""


@dataclass
class Svc:
    """A session's row: the lease, the running turn and the counters."""

    epoch: int = 0
    holder: str | None = None
    expires: float = 0.0
    running: str | None = None
    inputs: int = 0  # the last input's seq
    queued: int = 0  # inputs waiting to be turns of their own
    events: int = 0  # the last event's id


@dataclass
class TurnRow:
    """A turn's row."""

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
    seq: int = 0
    started_at: float | None = None
    ended_at: float | None = None
    usage: dict[str, int] = field(default_factory=dict)


class Tx:
    """One transaction on one session's row, and the events it appends.

    A writer (``write=True``) takes the file's write lock at once; a reader reads one
    snapshot. Leave with :meth:`commit` or :meth:`rollback` (an exception rolls back).
    """

    def __init__(self, db: sqlite3.Connection, *, write: bool) -> None:
        db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        self.db = db
        (self.now,) = cast(tuple[float], db.execute(NOW).fetchone())
        self.session = ""
        self.found = False
        self.svc = Svc()
        self._events: list[tuple[str, int, str, str | None, str, float]] = []

    def load(self, session: str) -> Svc:
        """Read the session's row (a fresh one if the session has none yet)."""
        self.session = session
        row = self.db.execute(
            f"SELECT {SVC} FROM steerable_service WHERE session = ?", (session,)
        ).fetchone()
        self.found = row is not None
        self.svc = Svc(*row) if row else Svc()
        return self.svc

    def emit(self, kind: EventKind, turn: str | None, data: dict[str, Any]) -> None:
        """Append a durable event of the session, with the next id."""
        self.svc.events += 1
        self._events.append((self.session, self.svc.events, kind, turn, json.dumps(data), self.now))

    def turn(self, id: str) -> TurnRow:
        """The session's turn ``id``, which exists."""
        turn = turn_row(self.db, self.session, id)
        assert turn is not None, f"session {self.session!r} lost its turn {id!r}"
        return turn

    def save_turn(self, t: TurnRow) -> None:
        """Write ``t``'s mutable columns back."""
        self.db.execute(
            "UPDATE steerable_turns SET state = ?, epoch = ?, steps = ?, steers_taken = ?,"
            " offered = ?, stop_requested = ?, end_position = ?, text = ?, error = ?,"
            " ended_at = ?, usage = ? WHERE session = ? AND id = ?",
            (
                *(t.state, t.epoch, t.steps, t.steers_taken, t.offered, t.stop_requested, t.end),
                *(json.dumps(t.text), dumps(t.error), t.ended_at, dumps_object(t.usage)),
                *(self.session, t.id),
            ),
        )

    def commit(self) -> None:
        """Write the session's row and the events back, and commit."""
        s = self.svc
        self.db.execute(
            f"INSERT INTO steerable_service (session, {SVC}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
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


def dumps(text: str | None) -> str | None:
    """A caller's text as stored (JSON), None kept."""
    return None if text is None else json.dumps(text)


def loads(text: str | None) -> str | None:
    """A stored text back (:func:`dumps`' inverse)."""
    return None if text is None else cast(str, json.loads(text))


def dumps_object(value: dict[str, Any]) -> str | None:
    """A JSON object as stored: its text, NULL for ``{}``."""
    return json.dumps(value) if value else None


def loads_object(text: str | None) -> dict[str, Any]:
    """A stored JSON object back (``{}`` for NULL)."""
    return {} if text is None else cast(dict[str, Any], json.loads(text))


def turn_row(db: sqlite3.Connection, session: str, id: str) -> TurnRow | None:
    """The session's turn ``id``, or None."""
    row = db.execute(
        f"SELECT {_TURN} FROM steerable_turns WHERE session = ? AND id = ?", (session, id)
    ).fetchone()
    if row is None:
        return None
    return _turn_of_row(row)


TURNS = f"SELECT {_TURN} FROM steerable_turns WHERE session = ? AND seq > ? ORDER BY seq LIMIT ?"
"""A page of turns, in their prompts' order off the ``steerable_turns_seq`` index (its plan
is tested)."""


def turn_rows(db: sqlite3.Connection, session: str, after: int, limit: int) -> list[TurnRow]:
    """Up to ``limit`` of the session's turns with prompt seq > ``after``, by seq."""
    rows = db.execute(TURNS, (session, after, max(limit, 0))).fetchall()
    return [_turn_of_row(row) for row in rows]


def _turn_of_row(row: tuple[Any, ...]) -> TurnRow:
    id, ord, start, cap, state, epoch, steps, steers_taken, offered, stop, *rest = row
    end, text, error, seq, started_at, ended_at, usage = rest
    turn = TurnRow(id, ord, start, cap, state, epoch, steps, steers_taken, offered, bool(stop))
    turn.end, turn.text, turn.error = end, json.loads(text), loads(error)
    turn.seq, turn.started_at, turn.ended_at = seq, started_at, ended_at
    turn.usage = loads_object(usage)
    return turn


def length(db: sqlite3.Connection, session: str) -> int:
    """The transcript's length, from the position index (no transcript read)."""
    (count,) = db.execute(LENGTH, (session,)).fetchone()
    return cast(int, count)


def input_view(row: tuple[Any, ...]) -> InputView:
    """The view of a row of :data:`INPUT`'s columns."""
    id, kind, text, seq, state, turn, step, at, metadata, trace = row
    return InputView(
        *(id, kind, json.loads(text), seq, state, turn, step, at),
        *(loads_object(metadata), loads_object(trace)),
    )


def turn_view(svc: Svc, turn: TurnRow) -> TurnView:
    """The view of ``turn``, with the lease of ``svc`` if it is the running turn."""
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
        seq=turn.seq,
        started_at=turn.started_at,
        ended_at=turn.ended_at,
        usage=turn.usage,
    )
