"""A store in one SQLite file, safe for several processes sharing it.

Open it with a path, in ``async with SQLiteStore(path) as store:`` (which opens the file
at once, so a file that cannot be used fails there, and closes it at the end); without
``async with`` the file is opened on the first call and closed by :meth:`close`. The
tables are created on open, and a file of an older schema is upgraded on open (SQLite is
the one store that migrates itself: one file has nobody to coordinate with). A short write
(a save, a take, a steer, a journal entry, and the service's step, enqueue, renewal and
turn's end) runs on the event loop's own thread when it can finish at once, and on the
store's worker thread when another connection holds the file's write lock or the write is
long; every other call runs on the worker, off the event loop
(:mod:`steerable.stores._sqlite_connections`). Writers take SQLite's write lock up front
(``BEGIN IMMEDIATE``), so a save-and-take is one transaction that other processes see whole
or not at all, and concurrent takers in any number of processes get each steer once. It is
:class:`~steerable.store.Rewritable` and :class:`~steerable.store.Forkable`: a fork copies
the message rows inside SQLite, in one ``INSERT ... SELECT`` of one write transaction.

It is :class:`~steerable.store.Journaling` and :class:`~steerable.store.Repairable` too. The
tool journal is a table of its own, a row per ``(session, call key)`` with the result's
stored text (NULL while the call runs): a begin reads the keys' rows and inserts the missing
ones under the write lock, so of any number of processes beginning one call exactly one is
told it is new, and an end is one upsert that fills a NULL result only (the first result
kept). ``delete`` forgets the journal in its transaction; ``fork`` and ``truncate`` leave it.
``replace`` is one write transaction built as ``truncate`` and ``save`` are: the write lock
first, then the tail's ids compared with ``old`` (:data:`TAIL`), the tail's rows deleted and
the new rows inserted with the time of their storing; the kept rows (and their times), the
steers and the service's rows are not touched, and it is not refused while a turn runs.

It is also a :class:`steerable.service_store.ServiceStore` (the service's inputs, turns,
leases and events: the writes in :mod:`steerable.stores._sqlite_service`, the reads in
:mod:`steerable.stores._sqlite_views`, the layout in :mod:`steerable.stores._sqlite_schema`).
Its leases and times run on SQLite's own clock, ``julianday('now')``, which is the
machine's clock: every process sharing the file is on that machine. It gives no hints
(SQLite has no notifications): the engine polls, and ``stopping`` answers a poll from its
last answer while nothing in the file changed.

The file is in WAL mode with ``synchronous=NORMAL``: a committed save survives the process
being killed; pass ``synchronous="FULL"`` to survive power loss too (then every call runs
on the worker: a commit waits for the disk).

Sharing one file: open one store object per process and share it among the process's tasks
(a store's short writes all run on its loop's thread, one at a time, so many objects in one
process gain nothing). Several processes can share the file; each waits for SQLite's write
lock in turn, sleeping in SQLite's busy handler. Taking 2,000 steers one a transaction with
48 tasks (``python -m bench.sqlite_sharing``, 2026-12-04, 2 shared cores): one store took
8,808 a second; 48 store objects in one process 0.93x that (0.28x before writes ran on the
loop's thread: their 48 worker threads slept in the busy handler); 4 processes 1.22x and 16
processes 0.90x (single runs on the busier machine earlier: 0.6 to 1.0x and 0.4 to 0.7x).
Under such contention the process that holds the lock most takes most: a waiter sleeps
1, 2, 5, ... ms between tries.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Literal, Self, TypeVar, get_args

from steerable import codec
from steerable.errors import (
    MessageNotFound,
    SessionBusy,
    SessionExists,
    TranscriptConflict,
    UsageError,
)
from steerable.journal import encode_result
from steerable.messages import Message, ToolResult
from steerable.store import Steer
from steerable.stores import _sqlite_journal
from steerable.stores._sqlite_connections import Connections
from steerable.stores._sqlite_leases import SQLiteLeases
from steerable.stores._sqlite_rows import CLOCK, LENGTH
from steerable.stores._sqlite_schema import SCHEMA_VERSION
from steerable.stores._sqlite_views import StopPoll

__all__ = ["SCHEMA_VERSION", "SQLiteStore"]

_T = TypeVar("_T")
_Synchronous = Literal["NORMAL", "FULL"]


class SQLiteStore(SQLiteLeases):
    """A :class:`steerable.Store` and a service store in the SQLite file ``path``.

    See the module docstring.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: _Synchronous = "NORMAL",
        busy_timeout: float = 30.0,
    ) -> None:
        if not isinstance(path, str | Path):
            raise UsageError(f"SQLiteStore takes a file path, not {type(path).__name__}")
        if synchronous not in get_args(_Synchronous):
            raise UsageError(f"synchronous is 'NORMAL' or 'FULL', not {synchronous!r}")
        if isinstance(busy_timeout, bool) or not isinstance(busy_timeout, int | float):
            raise UsageError(f"busy_timeout is a number of seconds, not {busy_timeout!r}")
        if not 0 <= busy_timeout < 2**31 / 1000:
            raise UsageError(f"busy_timeout is seconds >= 0, not {busy_timeout!r}")
        self.path = Path(path)
        self._connections = Connections(self.path, synchronous, int(busy_timeout * 1000))
        self._stop_poll = StopPoll()

    async def close(self) -> None:
        """Close the connections and the worker thread."""
        await self._connections.close()

    async def __aenter__(self) -> Self:
        await self._call(lambda db: None)
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def _call(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        return await self._connections.call(work)

    async def _write(self, work: Callable[[sqlite3.Connection], _T], size: int = 0) -> _T:
        return await self._connections.write(work, size)

    # -- the Store verbs -------------------------------------------------------------------

    async def messages(self, session: str) -> list[Message]:
        """The session's transcript, in position order (empty for a new session)."""

        def read(db: sqlite3.Connection) -> list[Message]:
            rows = db.execute(
                "SELECT position, id, body FROM steerable_messages"
                " WHERE session = ? ORDER BY position",
                (session,),
            ).fetchall()
            return [
                codec.decode(id, body, where=f"session {session!r}, position {pos}")
                for pos, id, body in rows
            ]

        return await self._call(read)

    async def save(
        self, session: str, messages: Sequence[Message], *, at: int, take: int = 0
    ) -> list[Message]:
        """Append ``messages`` at position ``at``, then take up to ``take`` steers; atomic."""
        rows = [(m.id, codec.encode(m)) for m in messages]
        size = sum(len(body) for _, body in rows)
        return await self._write(lambda db: _append(db, session, rows, at, take), size)

    async def take_steers(self, session: str, *, at: int | None, limit: int) -> list[Message]:
        """Take up to ``limit`` steers and record them at ``at`` (or at the end); atomic."""
        return await self._write(lambda db: _append(db, session, [], at, limit))

    async def steer(self, session: str, steer: Steer) -> None:
        """Leave ``steer`` in the session's box; a steer id seen before is ignored."""

        def insert(db: sqlite3.Connection) -> None:
            db.execute(
                "INSERT OR IGNORE INTO steerable_steers (session, id, text) VALUES (?, ?, ?)",
                (session, steer.id, steer.text),
            )

        await self._write(insert, len(steer.text))

    async def steers(self, session: str) -> list[Steer]:
        """The steers waiting in the session's box, oldest first."""

        def read(db: sqlite3.Connection) -> list[Steer]:
            rows = db.execute(
                "SELECT id, text FROM steerable_steers WHERE session = ? AND taken = 0"
                " ORDER BY seq",
                (session,),
            ).fetchall()
            return [Steer(text, id) for id, text in rows]

        return await self._call(read)

    # -- the Rewritable verbs -----------------------------------------------------------------

    async def truncate(self, session: str, *, at: int, length: int | None = None) -> list[Message]:
        """Remove the messages at positions ``at`` and after; returns them, in order."""
        return await self._call(lambda db: _truncate(db, session, at, length))

    async def delete(self, session: str) -> bool:
        """Forget the session's transcript, steers and service records; True if it had any."""
        return await self._call(lambda db: _delete(db, session))

    # -- the Forkable verb ------------------------------------------------------------------

    async def fork(self, session: str, new: str, *, through: str | None = None) -> int:
        """Start ``new`` with ``session``'s transcript through message ``through`` (all of it
        when None); how many messages were copied. One write transaction, the rows copied
        by SQLite (:data:`FORK_COPY`)."""
        return await self._call(lambda db: _fork(db, session, new, through))

    # -- the Journaling verbs (the SQL in steerable.stores._sqlite_journal) -------------------

    async def begin_calls(self, session: str, keys: Sequence[str]) -> dict[str, ToolResult | None]:
        """Mark each call started unless the journal knows it; what it knew, by key."""
        return await self._write(lambda db: _sqlite_journal.begin_calls(db, session, keys))

    async def end_call(self, session: str, key: str, result: ToolResult) -> ToolResult:
        """Record call ``key``'s result; the first recorded wins and is returned."""
        text = encode_result(key, result)  # InvalidMessage here, before any write
        return await self._write(
            lambda db: _sqlite_journal.end_call(db, session, key, result, text), len(text)
        )

    # -- the Repairable verb -----------------------------------------------------------------

    async def replace(
        self, session: str, *, at: int, old: Sequence[str], messages: Sequence[Message]
    ) -> None:
        """Swap the tail at ``at`` for ``messages`` if its ids are ``old``; one write
        transaction (:data:`TAIL` compared, then the tail's rows deleted and the new ones
        inserted)."""
        rows = [(m.id, codec.encode(m)) for m in messages]
        await self._call(lambda db: _replace(db, session, at, list(old), rows))


FORGET_MARK = "UPDATE steerable_service SET mark = NULL WHERE session = ? AND mark IS NOT NULL"
"""What every write that cuts, changes or forks into a transcript does to its session's row:
the transcript's mark is forgotten, and the next claim gives it a new one (see
:func:`steerable.stores._sqlite_service.mark_of`), so no claimer takes what it held for it."""


def _refuse_if_busy(db: sqlite3.Connection, session: str, what: str) -> None:
    """Inside a write transaction: :class:`SessionBusy` if a service turn runs on ``session``."""
    row = db.execute(
        "SELECT running FROM steerable_service WHERE session = ? AND running IS NOT NULL",
        (session,),
    ).fetchone()
    if row is not None:
        db.rollback()
        raise SessionBusy(session, row[0], what)


def _truncate(db: sqlite3.Connection, session: str, at: int, length: int | None) -> list[Message]:
    db.execute("BEGIN IMMEDIATE")
    _refuse_if_busy(db, session, "cut")
    if length is not None:
        (count,) = db.execute(
            "SELECT COALESCE(MAX(position) + 1, 0) FROM steerable_messages WHERE session = ?",
            (session,),
        ).fetchone()
        if count != length:
            db.rollback()
            raise TranscriptConflict(session, length, count)
    rows = db.execute(
        "DELETE FROM steerable_messages WHERE session = ? AND position >= ?"
        " RETURNING position, id, body",
        (session, at),
    ).fetchall()
    db.execute(FORGET_MARK, (session,))
    db.execute("COMMIT")
    rows.sort()
    return [codec.decode(i, b, where=f"session {session!r}, position {p}") for p, i, b in rows]


def _delete(db: sqlite3.Connection, session: str) -> bool:
    db.execute("BEGIN IMMEDIATE")
    _refuse_if_busy(db, session, "deleted")
    found = 0
    for table in ("steerable_messages", "steerable_steers", "steerable_inputs", "steerable_turns"):
        found += db.execute(f"DELETE FROM {table} WHERE session = ?", (session,)).rowcount
    # the journal and the events are forgotten but not counted, as the memory store does
    db.execute("DELETE FROM steerable_journal WHERE session = ?", (session,))
    db.execute("DELETE FROM steerable_events WHERE session = ?", (session,))
    # the row stays for its epoch (a stale holder stays fenced) and its event count (ids go
    # on); with no inputs it is not listed; its metadata is forgotten
    (metadata,) = db.execute(
        "SELECT COUNT(*) FROM steerable_service WHERE session = ? AND metadata IS NOT NULL",
        (session,),
    ).fetchone()
    found += int(metadata)
    db.execute(
        "UPDATE steerable_service SET holder = NULL, expires = 0, inputs = 0, queued = 0,"
        " metadata = NULL, mark = NULL WHERE session = ?",
        (session,),
    )
    db.execute("COMMIT")
    return found > 0


TAIL = "SELECT id FROM steerable_messages WHERE session = ? AND position >= ? ORDER BY position"
"""The ids of a transcript's tail, which ``replace`` compares with ``old`` (its plan is
tested: the position index, no sort)."""


def _replace(
    db: sqlite3.Connection, session: str, at: int, old: list[str], rows: list[tuple[str, str]]
) -> None:
    # BEGIN IMMEDIATE before the compare, as truncate and save take it: no write of any
    # process (save, step, truncate, fork, claim) can come between the compare and the swap.
    # No busy check: the orphan repair writes this at a turn's start, and a write that came
    # after its read makes the compare fail.
    db.execute("BEGIN IMMEDIATE")
    (count,) = db.execute(LENGTH, (session,)).fetchone()
    if at > count or [id for (id,) in db.execute(TAIL, (session, at))] != old:
        db.rollback()
        raise TranscriptConflict(session, at + len(old), count)
    db.execute("DELETE FROM steerable_messages WHERE session = ? AND position >= ?", (session, at))
    # an id of a kept message, or one twice in ``rows``, fails the id index: an
    # IntegrityError, which _run rolls back and raises as InvalidMessage
    db.executemany(
        "INSERT INTO steerable_messages (session, position, id, body, at)"
        f" VALUES (?, ?, ?, ?, {CLOCK})",
        [(session, at + i, id, body) for i, (id, body) in enumerate(rows)],
    )
    db.execute(FORGET_MARK, (session,))
    db.execute("COMMIT")


FORK_COPY = (
    "INSERT INTO steerable_messages (session, position, id, body, at)"
    " SELECT ?, position, id, body, at FROM steerable_messages"
    " WHERE session = ? AND position <= ?"
)
"""A fork's copy: the message rows of a session through a position, under the new session,
each with its id, body (parts and ``steered``), position and stored time; one statement
over the position index (its plan is tested), never a row through Python."""

_OCCUPIED = (
    "SELECT EXISTS (SELECT 1 FROM steerable_messages WHERE session = :s)"
    " OR EXISTS (SELECT 1 FROM steerable_steers WHERE session = :s)"
    " OR EXISTS (SELECT 1 FROM steerable_inputs WHERE session = :s)"
    " OR EXISTS (SELECT 1 FROM steerable_service WHERE session = :s AND metadata IS NOT NULL)"
)
"""Whether a session has anything a fork into it would meet: a transcript, a steer ever left
(taken ones too: ``steer`` ignores their ids for ever), an input in any state, metadata.
A session's service row alone (kept by ``delete`` for its epoch) is nothing."""

_EVERY_POSITION = 2**63 - 1  # SQLite's largest integer


def _fork(db: sqlite3.Connection, session: str, new: str, through: str | None) -> int:
    # BEGIN IMMEDIATE is the lock every first write to a session takes: of two forks into
    # ``new`` (any processes), the second reads the first's rows and is refused
    db.execute("BEGIN IMMEDIATE")
    last = _EVERY_POSITION
    if through is not None:
        row = db.execute(
            "SELECT position FROM steerable_messages WHERE session = ? AND id = ?",
            (session, through),
        ).fetchone()
        if row is None:
            db.rollback()
            raise MessageNotFound(session, through)
        (last,) = row
    (occupied,) = db.execute(_OCCUPIED, {"s": new}).fetchone()
    if occupied:
        db.rollback()
        raise SessionExists(new)
    copied = db.execute(FORK_COPY, (new, session, last)).rowcount
    db.execute(FORGET_MARK, (new,))
    db.execute("COMMIT")
    return copied


STEER_WAITS = "SELECT 1 FROM steerable_steers WHERE session = ?1 AND taken = 0"
"""Whether a steer waits in the session's box: a save looks before it takes, which costs a
step with none waiting about a microsecond where the take's ``UPDATE`` cost about five (one
lookup of the waiting index; its plan is tested)."""

APPEND_LOOK = f"SELECT ({LENGTH.replace('= ?', '= ?1')}), EXISTS ({STEER_WAITS})"
"""A save's first read, one statement: the transcript's length (:data:`LENGTH`) and whether
a steer waits (:data:`STEER_WAITS`)."""


def _append(
    db: sqlite3.Connection,
    session: str,
    rows: list[tuple[str, str]],
    at: int | None,
    take: int,
) -> list[Message]:
    """One write transaction: check the position, append the rows, take and record steers."""
    db.execute("BEGIN IMMEDIATE")
    count, waits = db.execute(APPEND_LOOK, (session,)).fetchone()
    if at is not None and at != count:
        db.rollback()
        raise TranscriptConflict(session, at, count)
    taken: list[Message] = []
    if take and waits:
        steers = db.execute(
            "UPDATE steerable_steers SET taken = 1 WHERE seq IN (SELECT seq FROM steerable_steers"
            " WHERE session = ? AND taken = 0 ORDER BY seq LIMIT ?) RETURNING seq, id, text",
            (session, take),
        ).fetchall()
        steers.sort()
        taken = [Steer(text, id).message() for _, id, text in steers]
        ids = [m.id for m in taken]
        recorded = (
            {id for id, _ in rows}
            | {
                id
                for (id,) in db.execute(
                    "SELECT id FROM steerable_messages WHERE session = ? AND id IN"
                    f" ({','.join('?' * len(ids))})",
                    (session, *ids),
                )
            }
            if ids
            else set()
        )
        taken = [m for m in taken if m.id not in recorded]  # recorded another way already
        rows = rows + [(m.id, codec.encode(m)) for m in taken]
    if rows:
        db.executemany(
            "INSERT INTO steerable_messages (session, position, id, body, at)"
            f" VALUES (?, ?, ?, ?, {CLOCK})",
            [(session, count + i, id, body) for i, (id, body) in enumerate(rows)],
        )
    db.execute("COMMIT")
    return taken
