"""The SQLite store's service reads: status, inputs, turns, transcript, events, listing, and
the stop poll.

Each read that looks at more than one row runs in one snapshot (a ``BEGIN`` transaction),
and each is bounded by its ``limit`` in SQL, on an index that yields the rows in order: a
status of 100 waiting inputs out of 10,000 reads 100 texts.

The stop poll (:class:`StopPoll`) is what a replica calls about every 0.2 s while it holds
turns. It answers from its last answer when nothing in the file changed since: SQLite's
``PRAGMA data_version`` changes when *another* connection commits (in this process or any
other), and the connection's ``total_changes`` grows with every row *this* connection
writes (a stop asked through this same store included). Both unchanged: the file is as it
was at the last answer.
"""

from __future__ import annotations

import json
import sqlite3
from typing import cast

from steerable import codec
from steerable.service_store import (
    Entry,
    InputState,
    InputView,
    ServiceEvent,
    SessionState,
    SessionSummary,
    Status,
    TurnView,
    listing,
    turn_of,
)
from steerable.stores._sqlite_rows import (
    INPUT,
    QUEUED,
    Tx,
    input_view,
    loads_object,
    turn_row,
    turn_rows,
    turn_view,
)

__all__ = ["STOPPING", "WAITING", "WAITING_TOTAL", "StopPoll", "listing_query"]

# A listing's filter on the state, applied before its LIMIT (columns of the session's row).
_STATE_FILTER: dict[SessionState | None, str] = {
    None: "",
    "running": " AND s.running IS NOT NULL",
    "queued": " AND s.running IS NULL AND s.queued > 0",
    "idle": " AND s.running IS NULL AND s.queued = 0",
}

STOPPING = (
    "SELECT s.session FROM steerable_service AS s JOIN steerable_turns AS t"
    " ON t.session = s.session AND t.id = s.running"
    " WHERE s.holder = ? AND t.stop_requested = 1 ORDER BY s.session"
)
"""The stop poll's query: the holder's sessions on the holder index, one turn lookup each
(its plan is tested, as are the two below)."""

WAITING = (
    f"SELECT {INPUT} FROM steerable_inputs INDEXED BY steerable_inputs_queue"
    " WHERE session = ? AND seq > ? AND state = 'waiting' ORDER BY seq LIMIT ?"
)
"""A page of waiting inputs: in seq order off their index, so only the page's rows (and
texts) are read, however many inputs wait or were answered before them. Named, because
without statistics SQLite may pick the primary key and read every row to check its state."""
WAITING_TOTAL = "SELECT COUNT(*) FROM steerable_inputs WHERE session = ? AND state = 'waiting'"
"""How many inputs wait: a count of the index, no row read."""


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
        "SELECT s.session, s.running, s.queued, e.at, s.metadata FROM steerable_service AS s"
        " LEFT JOIN steerable_events AS e ON e.session = s.session AND e.id = s.events"
        f" WHERE {where} AND s.inputs > 0{_STATE_FILTER[state]} ORDER BY s.session LIMIT ?"
    )
    return sql, args


class StopPoll:
    """The answers of ``stopping``, each kept until the file changes (module docstring).

    Used on the store's one worker thread only; the kept answer belongs to one connection
    (a reopened store asks again).
    """

    def __init__(self) -> None:
        self._kept: tuple[sqlite3.Connection, str, int, int, list[str]] | None = None

    def read(self, db: sqlite3.Connection, holder: str) -> list[str]:
        """The sessions ``holder`` holds whose running turn has a stop waiting, sorted."""
        # both marks are read before the query: a commit after them changes one of them,
        # so the next call asks again
        (version,) = db.execute("PRAGMA data_version").fetchone()
        changes = db.total_changes
        kept = self._kept
        if kept is not None and kept[:4] == (db, holder, version, changes):
            return list(kept[4])
        sessions = [session for (session,) in db.execute(STOPPING, (holder,))]
        self._kept = (db, holder, version, changes, sessions)
        return list(sessions)


def status(db: sqlite3.Connection, session: str, limit: int) -> Status:
    """The running turn, the first ``limit`` waiting inputs, the counts, the metadata."""
    tx = Tx(db, write=False)
    svc = tx.load(session)
    running = turn_view(svc, tx.turn(svc.running)) if svc.running else None
    rows = db.execute(WAITING, (session, 0, max(limit, 0))).fetchall()
    (total,) = db.execute(WAITING_TOTAL, (session,)).fetchone()
    metadata = db.execute(
        "SELECT metadata FROM steerable_service WHERE session = ?", (session,)
    ).fetchone()
    tx.rollback()
    return Status(
        session,
        running,
        [input_view(r) for r in rows],
        svc.queued,
        total,
        loads_object(metadata[0] if metadata else None),
    )


def input(db: sqlite3.Connection, session: str, id: str) -> InputView | None:
    """The input ``id`` of the session, or None."""
    row = db.execute(
        f"SELECT {INPUT} FROM steerable_inputs WHERE session = ? AND id = ?", (session, id)
    ).fetchone()
    return None if row is None else input_view(row)


def inputs(
    db: sqlite3.Connection, session: str, after: int, limit: int, state: InputState | None
) -> list[InputView]:
    """Up to ``limit`` inputs with seq > ``after``, by seq, only ``state``'s if given.

    The waiting ones are read off their index; any other state by the primary key, in
    order, skipping the others.
    """
    if state == "waiting":
        rows = db.execute(WAITING, (session, after, max(limit, 0))).fetchall()
    else:
        where = "" if state is None else " AND state = ?"
        rows = db.execute(
            f"SELECT {INPUT} FROM steerable_inputs WHERE session = ? AND seq > ?{where}"
            " ORDER BY seq LIMIT ?",
            (session, after, *(() if state is None else (state,)), max(limit, 0)),
        ).fetchall()
    return [input_view(r) for r in rows]


def turn(db: sqlite3.Connection, session: str, id: str) -> TurnView | None:
    """The turn ``id`` (``queued`` while its prompt waits), or None."""
    tx = Tx(db, write=False)
    svc = tx.load(session)
    row = turn_row(db, session, id)
    queued = db.execute(
        f"SELECT seq FROM steerable_inputs WHERE {QUEUED} AND id = ?", (session, id)
    ).fetchone()
    tx.rollback()
    if row is not None:
        return turn_view(svc, row)
    return TurnView(id, "queued", seq=queued[0]) if queued else None


def turns(db: sqlite3.Connection, session: str, after: int, limit: int) -> list[TurnView]:
    """Up to ``limit`` turns that started, by their prompt's seq, seq > ``after``."""
    tx = Tx(db, write=False)
    svc = tx.load(session)
    rows = turn_rows(db, session, after, limit)
    tx.rollback()
    return [turn_view(svc, row) for row in rows]


def transcript(db: sqlite3.Connection, session: str, after: int, limit: int) -> list[Entry]:
    """Up to ``limit`` messages at positions > ``after``, with their turns and times."""
    tx = Tx(db, write=False)
    first = max(after + 1, 0)
    rows = db.execute(
        "SELECT position, id, body, at FROM steerable_messages WHERE session = ?"
        " AND position >= ? ORDER BY position LIMIT ?",
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
        Entry(
            p,
            codec.decode(i, b, where=f"session {session!r}, position {p}"),
            turn_of(p, starts),
            cast(float | None, at),
        )
        for p, i, b, at in rows
    ]


def events(db: sqlite3.Connection, session: str, after: int, limit: int) -> list[ServiceEvent]:
    """Up to ``limit`` events with ids > ``after``, in id order."""
    rows = db.execute(
        "SELECT id, kind, turn, data, at FROM steerable_events WHERE session = ? AND id > ?"
        " ORDER BY id LIMIT ?",
        (session, max(after, 0), max(limit, 0)),
    ).fetchall()
    return [ServiceEvent(id, kind, turn, json.loads(data), at) for id, kind, turn, data, at in rows]


def sessions(
    db: sqlite3.Connection, prefix: str, after: str | None, limit: int, state: SessionState | None
) -> list[SessionSummary]:
    """Up to ``limit`` sessions with an input, by id, in the listing's range."""
    sql, args = listing_query(prefix, after, state)
    rows = db.execute(sql, (*args, max(limit, 0))).fetchall()
    return [
        SessionSummary(
            session,
            "running" if running is not None else "queued" if queued else "idle",
            running,
            queued,
            float(at or 0.0),
            loads_object(metadata),
        )
        for session, running, queued, at, metadata in rows
    ]
