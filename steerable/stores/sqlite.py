"""A store in one SQLite file, safe for several processes sharing it.

Open it with a path, in ``async with SQLiteStore(path) as store:`` (which opens the file
at once, so a file that cannot be used fails there, and closes it at the end); without
``async with`` the file is opened on the first call and closed by :meth:`close`. The
tables are created on open, and a file of an older schema is upgraded on open (SQLite is
the one store that migrates itself: one file has nobody to coordinate with). Every call
runs on one worker thread of this store, off the event loop. Writers take SQLite's write
lock up front (``BEGIN IMMEDIATE``), so a save-and-take is one transaction that other
processes see whole or not at all, and concurrent takers in any number of processes get
each steer once.

It is also a :class:`steerable.service_store.ServiceStore` (the service's inputs, turns,
leases and events: :mod:`steerable.stores._sqlite_service`). Its leases run on SQLite's
own clock, ``julianday('now')``, which is the machine's clock: every process sharing the
file is on that machine. It gives no hints (SQLite has no notifications): the engine polls.

The file is in WAL mode with ``synchronous=NORMAL``: a committed save survives the process
being killed; pass ``synchronous="FULL"`` to survive power loss too.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Literal, Self, TypeVar, get_args

from steerable import codec
from steerable.errors import (
    InvalidMessage,
    SessionBusy,
    StoreUnavailable,
    TranscriptConflict,
    UsageError,
)
from steerable.messages import Message
from steerable.store import Steer
from steerable.stores._sqlite_service import SERVICE_TABLES, SQLiteServiceTables

__all__ = ["SCHEMA_VERSION", "SQLiteStore"]

SCHEMA_VERSION = 2
"""The schema version this steerable writes (``PRAGMA user_version`` of the file)."""

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

# The file's schema, version by version: a file of version n gets the steps after n on open,
# in one transaction. Append a step for a change, never edit a shipped one.
_STEPS: tuple[tuple[int, str], ...] = ((1, _TABLES), (2, SERVICE_TABLES))

# A rowid table, not WITHOUT ROWID: SQLite keeps at most ~1 KB of a WITHOUT ROWID row in
# its page, so every message over that got a mostly empty overflow page of its own (the
# file was ~4x its payload). The position index keeps "the end" and ordered reads cheap.

_T = TypeVar("_T")
_Synchronous = Literal["NORMAL", "FULL"]


class SQLiteStore(SQLiteServiceTables):
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
        self._synchronous = synchronous
        self._busy_ms = int(busy_timeout * 1000)
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="steerable-sqlite")
        self._db: sqlite3.Connection | None = None

    async def close(self) -> None:
        """Close the connection and the worker thread."""
        if self._db is not None:
            db, self._db = self._db, None
            await asyncio.get_running_loop().run_in_executor(self._executor, db.close)
        self._executor.shutdown(wait=False)

    async def __aenter__(self) -> Self:
        await self._call(lambda db: None)
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # -- the worker thread ------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        try:
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise StoreUnavailable(
                f"cannot open the SQLite file {str(self.path)!r}: {exc}"
            ) from exc
        try:
            db.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
            db.execute("PRAGMA journal_mode = WAL")
            db.execute(f"PRAGMA synchronous = {self._synchronous}")
            _upgrade(db, self.path)
        except sqlite3.Error as exc:
            db.close()
            raise StoreUnavailable(f"cannot use the SQLite file {str(self.path)!r}: {exc}") from exc
        except BaseException:
            db.close()
            raise
        return db

    def _run(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        if self._db is None:
            self._db = self._connect()
        try:
            return work(self._db)
        except sqlite3.IntegrityError as exc:
            self._rollback()
            raise InvalidMessage(f"a message or steer id is already in the session: {exc}") from exc
        except sqlite3.Error as exc:
            self._rollback()
            raise StoreUnavailable(f"SQLite file {str(self.path)!r}: {exc}") from exc
        except BaseException:
            self._rollback()
            raise

    def _rollback(self) -> None:
        if self._db is not None and self._db.in_transaction:
            self._db.rollback()

    async def _call(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._run, work)

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
        return await self._call(lambda db: _append(db, session, rows, at, take))

    async def take_steers(self, session: str, *, at: int | None, limit: int) -> list[Message]:
        """Take up to ``limit`` steers and record them at ``at`` (or at the end); atomic."""
        return await self._call(lambda db: _append(db, session, [], at, limit))

    async def steer(self, session: str, steer: Steer) -> None:
        """Leave ``steer`` in the session's box; a steer id seen before is ignored."""

        def insert(db: sqlite3.Connection) -> None:
            db.execute(
                "INSERT OR IGNORE INTO steerable_steers (session, id, text) VALUES (?, ?, ?)",
                (session, steer.id, steer.text),
            )

        await self._call(insert)

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
    db.execute("COMMIT")
    rows.sort()
    return [codec.decode(i, b, where=f"session {session!r}, position {p}") for p, i, b in rows]


def _delete(db: sqlite3.Connection, session: str) -> bool:
    db.execute("BEGIN IMMEDIATE")
    _refuse_if_busy(db, session, "deleted")
    found = 0
    for table in ("steerable_messages", "steerable_steers", "steerable_inputs", "steerable_turns"):
        found += db.execute(f"DELETE FROM {table} WHERE session = ?", (session,)).rowcount
    db.execute("DELETE FROM steerable_events WHERE session = ?", (session,))
    # the row stays for its epoch (a stale holder stays fenced) and its event count (ids go
    # on); with no inputs it is not listed
    db.execute(
        "UPDATE steerable_service SET holder = NULL, expires = 0, inputs = 0, queued = 0"
        " WHERE session = ?",
        (session,),
    )
    db.execute("COMMIT")
    return found > 0


def _upgrade(db: sqlite3.Connection, path: Path) -> None:
    """Bring the file's schema to :data:`SCHEMA_VERSION`; refuse a newer one."""

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
    for step, tables in _STEPS:
        if step > current:
            for statement in tables.split(";"):
                if statement.strip():
                    db.execute(statement)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    db.execute("COMMIT")


def _append(
    db: sqlite3.Connection,
    session: str,
    rows: list[tuple[str, str]],
    at: int | None,
    take: int,
) -> list[Message]:
    """One write transaction: check the position, append the rows, take and record steers."""
    db.execute("BEGIN IMMEDIATE")
    (count,) = db.execute(
        "SELECT COALESCE(MAX(position) + 1, 0) FROM steerable_messages WHERE session = ?",
        (session,),
    ).fetchone()
    if at is not None and at != count:
        db.rollback()
        raise TranscriptConflict(session, at, count)
    taken: list[Message] = []
    if take:
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
            "INSERT INTO steerable_messages (session, position, id, body) VALUES (?, ?, ?, ?)",
            [(session, count + i, id, body) for i, (id, body) in enumerate(rows)],
        )
    db.execute("COMMIT")
    return taken
