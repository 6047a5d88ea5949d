"""The SQLite store's file layout, version by version, and its upgrade on open.

A file records its version in ``PRAGMA user_version``. A file of version n gets the steps
after n on open, in one transaction (SQLite is the one store that migrates itself: one
file has nobody to coordinate with); a file of a newer version is refused and left alone.
Append a step for a change, never edit a shipped one. No statement or comment inside a
step may hold a semicolon: the upgrade splits a step on them.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from steerable.errors import StoreUnavailable

__all__ = ["SCHEMA_VERSION", "STEPS", "upgrade"]

# Version 1: the core store's transcript and steer box. A rowid table, not WITHOUT ROWID:
# SQLite keeps at most ~1 KB of a WITHOUT ROWID row in its page, so every message over
# that got a mostly empty overflow page of its own (the file was ~4x its payload). The
# position index keeps "the end" and ordered reads cheap.
_TABLES = """
CREATE TABLE IF NOT EXISTS steerable_messages (
    session  TEXT    NOT NULL,
    position INTEGER NOT NULL,
    id       TEXT    NOT NULL,
    body     TEXT    NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS steerable_messages_position
    ON steerable_messages (session, position);
CREATE UNIQUE INDEX IF NOT EXISTS steerable_messages_id ON steerable_messages (session, id);
CREATE TABLE IF NOT EXISTS steerable_steers (
    seq     INTEGER PRIMARY KEY AUTOINCREMENT,
    session TEXT    NOT NULL,
    id      TEXT    NOT NULL,
    text    TEXT    NOT NULL,
    taken   INTEGER NOT NULL DEFAULT 0,
    UNIQUE (session, id)
);
CREATE INDEX IF NOT EXISTS steerable_steers_waiting ON steerable_steers (session, taken, seq);
"""

# Version 2: the service's tables. ``expires`` is 0 whenever nobody holds the session, so
# "no live lease" is ``expires <= now``; the partial index holds only the sessions with
# work (a running turn or a queued input), so a claim of any session never reads the idle
# ones.
_SERVICE_TABLES = """
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

# Version 3: the queue's views, times, usage and metadata. The times are Unix seconds on
# SQLite's clock (``at`` of a message stored before this step stays NULL: no time was
# kept). An input's arrival and a turn's start and end are taken from the events that
# recorded them (the events' ``at`` is that same clock), each event table read once and
# joined on a key. ``metadata`` and ``usage`` are JSON objects, NULL for ``{}``. The
# input state ``cancelled`` needs no change: the state column has no check.
# ``steerable_inputs_queue`` pages the waiting inputs by seq without reading the others'
# rows (a status of 100 out of 10,000 reads 100 texts) and counts them without reading any
# (``state`` is in it so that SQLite sees the count covered: it sits after ``text`` in the
# row, past a long text's overflow pages); ``steerable_turns_seq`` pages the
# turns; ``steerable_service_holder`` holds only the sessions someone holds, which the stop
# poll reads by holder.
_QUEUE = """
ALTER TABLE steerable_messages ADD COLUMN at REAL;
ALTER TABLE steerable_inputs ADD COLUMN at REAL NOT NULL DEFAULT 0;
ALTER TABLE steerable_inputs ADD COLUMN metadata TEXT;
ALTER TABLE steerable_turns ADD COLUMN seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE steerable_turns ADD COLUMN started_at REAL;
ALTER TABLE steerable_turns ADD COLUMN ended_at REAL;
ALTER TABLE steerable_turns ADD COLUMN usage TEXT;
ALTER TABLE steerable_service ADD COLUMN metadata TEXT;
UPDATE steerable_turns SET seq = COALESCE((SELECT i.seq FROM steerable_inputs AS i
    WHERE i.session = steerable_turns.session AND i.id = steerable_turns.id), 0);
UPDATE steerable_inputs SET at = e.at FROM (
    SELECT session, json_extract(data, '$.id') AS id, MIN(at) AS at FROM steerable_events
    WHERE kind = 'input' GROUP BY 1, 2
) AS e WHERE e.session = steerable_inputs.session AND e.id = steerable_inputs.id;
UPDATE steerable_turns SET started_at = e.started, ended_at = e.ended FROM (
    SELECT session, turn, MIN(CASE WHEN kind = 'turn_started' THEN at END) AS started,
        MAX(CASE WHEN kind = 'turn_ended' THEN at END) AS ended FROM steerable_events
    WHERE kind IN ('turn_started', 'turn_ended') GROUP BY 1, 2
) AS e WHERE e.session = steerable_turns.session AND e.turn = steerable_turns.id;
CREATE INDEX steerable_inputs_queue ON steerable_inputs (session, seq, state)
    WHERE state = 'waiting';
CREATE INDEX steerable_turns_seq ON steerable_turns (session, seq);
CREATE INDEX steerable_service_holder ON steerable_service (holder, session)
    WHERE holder IS NOT NULL
"""

# Version 4: the tool journal, one row per call key of a session: ``result`` is NULL while
# the call is started and not ended, then the stored text of its result
# (:func:`steerable.journal.encode_result`, kept as TEXT so that it comes back byte for byte).
# A rowid table, as the messages are (a result can be long), keyed by its primary key's index.
_JOURNAL = """
CREATE TABLE steerable_journal (
    session TEXT NOT NULL,
    key     TEXT NOT NULL,
    result  TEXT,
    PRIMARY KEY (session, key)
)
"""

# Version 5: an input's trace context (issue 21), the W3C carrier of the span that sent it, as
# JSON text of an object apart from the user's ``metadata``; NULL for ``{}``, as metadata, so
# the inputs of before read ``{}`` and the step only adds the column.
_TRACE = """
ALTER TABLE steerable_inputs ADD COLUMN trace TEXT
"""

# Version 6: a transcript's mark (issue 24), the token a claim returns and a claimer that
# held the transcript checks: NULL until a claim gives it one, and again after any write that
# cuts, changes or forks into the transcript (then the next claim gives it a new one).
_MARK = """
ALTER TABLE steerable_service ADD COLUMN mark TEXT
"""

STEPS: tuple[tuple[int, str], ...] = (
    (1, _TABLES),
    (2, _SERVICE_TABLES),
    (3, _QUEUE),
    (4, _JOURNAL),
    (5, _TRACE),
    (6, _MARK),
)
"""The file's schema steps in order: ``(version, statements)``."""

SCHEMA_VERSION = STEPS[-1][0]
"""The schema version this steerable writes (``PRAGMA user_version`` of the file)."""


def upgrade(db: sqlite3.Connection, path: Path) -> None:
    """Bring the file's schema to :data:`SCHEMA_VERSION` in one transaction; refuse a newer
    one (:class:`StoreUnavailable`, the file untouched)."""

    def version() -> int:
        return int(db.execute("PRAGMA user_version").fetchone()[0])

    if version() == SCHEMA_VERSION:
        return
    db.execute("BEGIN IMMEDIATE")  # read again under the lock: another process may upgrade too
    current = version()
    if current > SCHEMA_VERSION:
        db.rollback()
        raise StoreUnavailable(
            f"{str(path)!r} has steerable schema {current}; this version reads"
            f" {SCHEMA_VERSION}: upgrade steerable"
        )
    for step, statements in STEPS:
        if step > current:
            for statement in statements.split(";"):
                if statement.strip():
                    db.execute(statement)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    db.execute("COMMIT")
