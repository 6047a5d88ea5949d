"""The SQLite store's two connections to its file: the worker thread's and the event loop's.

Every call can run on the store's one worker thread, on the worker's connection, which waits
up to the store's busy timeout for another connection's write lock. A short write (a save, a
service step, an enqueue, a renewal, a turn's end, a journal entry) runs first on the event
loop's own thread, on a connection of its own that never waits: its busy timeout is zero, so
when another connection (of this store, of another store, of another process) holds the
write lock, SQLite answers ``SQLITE_BUSY`` at once, the attempt is rolled back whole, and the
same write runs on the worker thread as any call does. The hop to the worker and back cost
more than such a write itself (a step's save took 95 µs through the worker, 41 to 48 µs on
the loop's thread: ``python -m bench.floor``, docs/benchmarks.md); a write never waits on
the loop's thread, and one that finishes there does not yield to the loop (it is over in
well under :data:`SHORT_BYTES`' ~150 µs).

SQLite's own locks arbitrate between the two connections as between any two: their
transactions never interleave, and a write on one sees the other's last commit. A
connection is used by one thread at a time: the worker's by the worker only, the loop's by
whichever loop thread holds its lock (a second thread finding it taken uses the worker).

The loop's connection only ever writes with ``synchronous=NORMAL``, whose commit in WAL mode
appends to the log and does not wait for the disk, and survives a killed process as the
worker's commits do. A store opened with ``synchronous="FULL"`` has no loop connection: its
commit waits for the disk (an fsync), which the event loop must not. The loop connection
never checkpoints (``wal_autocheckpoint`` off): a checkpoint copies the log into the file and
syncs it, so it runs on the worker, a passive one after every :data:`CHECKPOINT_EVERY`
writes on the loop's connection (SQLite's own automatic checkpoint stays on for the worker's
connection). While it runs, writes go to the worker, after it: a checkpoint racing a writer
never catches up with the log's end, and only a complete one lets the next writer reuse the
log from its start. A write of more than :data:`SHORT_BYTES` of text goes to the worker at
once.

A write that waits on the worker waits in SQLite's own busy handler, which sleeps 1, 2, 5,
... up to 100 ms between tries. Retrying from Python every 50 µs to 1 ms instead was
measured (``python -m bench.sqlite_sharing``, 4 to 16 processes taking steers from one
file) and took fewer steers a second in all, 0.3 to 0.5x at 16 processes on 2 cores: the
wake-ups took the CPU from the process holding the lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from steerable.errors import InvalidMessage, StoreUnavailable
from steerable.stores._sqlite_schema import upgrade

__all__ = ["CHECKPOINT_EVERY", "SHORT_BYTES", "Connections"]

_T = TypeVar("_T")

SHORT_BYTES = 32 * 1024
"""The most text (messages' encoded bodies) a write may carry and still run on the loop's
thread: about 150 µs of SQLite's work at most, which the loop may spend."""

CHECKPOINT_EVERY = 128
"""Writes on the loop's connection between two passive checkpoints on the worker. A save of
a step's two ~1 KB messages appends about 7 pages to the log, so this is about as often as
SQLite's own automatic checkpoint (every 1,000 pages), which keeps the log short: a log
that only grows makes every commit extend the file, which doubled a commit's time."""


class _Busy(Exception):
    """The loop's connection met another's write lock: run the write on the worker."""


class Connections:
    """The worker thread and its connection, and the loop's connection for short writes."""

    def __init__(self, path: Path, synchronous: str, busy_ms: int) -> None:
        self.path = path
        self._synchronous = synchronous
        self._busy_ms = busy_ms
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="steerable-sqlite")
        self.db: sqlite3.Connection | None = None  # the worker's
        self.fast: sqlite3.Connection | None = None  # the loop's; None: every call on the worker
        self._fast_lock = threading.Lock()  # held by the thread using ``fast``
        self._writes = 0  # on ``fast`` since the last checkpoint was asked
        self._checkpointing = False

    async def close(self) -> None:
        """Close both connections (on the worker, which checkpoints last) and the worker."""
        fast, self.fast = self.fast, None
        if self.db is not None or fast is not None:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._executor, self._close, fast)
        self._executor.shutdown(wait=False)

    def _close(self, fast: sqlite3.Connection | None) -> None:
        if fast is not None:
            with self._fast_lock:  # a write on another loop thread finishes first
                fast.close()
        if self.db is not None:
            db, self.db = self.db, None
            db.close()

    # -- the worker thread ------------------------------------------------------------------

    async def call(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run ``work`` on the worker thread's connection; errors translated.

        The result comes back beside the executor's future, not through it: the event loop
        keeps the future (in the callback that wakes the caller) until the caller's task next
        yields, so a result read through it lived on past the caller's use of it, and a large
        one was freed at the caller's next ``await``, on the loop's thread holding the GIL
        while the worker, just woken for the next call, waited for it (the rows of a whole claim
        of 10,000 messages: about 3 ms, ``python -m bench.sqlite_next_call``)."""
        box: list[_T] = []
        await asyncio.get_running_loop().run_in_executor(self._executor, self._run_into, work, box)
        return box.pop()

    def _run_into(self, work: Callable[[sqlite3.Connection], _T], box: list[_T]) -> None:
        box.append(self._run(work))

    def _run(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        if self.db is None:
            self.db = self._connect()
            if self._synchronous == "NORMAL":
                self.fast = self._connect_fast()
        return _attempt(self.db, work, self.path)

    def _connect(self) -> sqlite3.Connection:
        db = _open(self.path)
        try:
            db.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
            db.execute("PRAGMA journal_mode = WAL")
            db.execute(f"PRAGMA synchronous = {self._synchronous}")
            upgrade(db, self.path)
        except sqlite3.Error as exc:
            db.close()
            raise StoreUnavailable(f"cannot use the SQLite file {str(self.path)!r}: {exc}") from exc
        except BaseException:
            db.close()
            raise
        return db

    def _connect_fast(self) -> sqlite3.Connection:
        """The loop's connection, made on the worker after the file is set up."""
        fast = _open(self.path)
        try:
            fast.execute("PRAGMA busy_timeout = 0")
            fast.execute("PRAGMA wal_autocheckpoint = 0")
            fast.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.Error as exc:
            fast.close()
            raise StoreUnavailable(f"cannot use the SQLite file {str(self.path)!r}: {exc}") from exc
        return fast

    def _checkpoint_now(self) -> None:
        """On the worker: a passive checkpoint (it waits on nobody; what it cannot copy now
        the next one does). A failure is left to the next one."""
        try:
            if self.db is not None:
                with contextlib.suppress(sqlite3.Error):
                    self.db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        finally:
            self._checkpointing = False

    # -- the loop's thread ---------------------------------------------------------------

    async def write(self, work: Callable[[sqlite3.Connection], _T], size: int = 0) -> _T:
        """Run the write transaction ``work`` on the loop's thread if it can finish at once,
        else on the worker; errors translated as :meth:`call`'s. ``size``: the bytes of text
        it writes (over :data:`SHORT_BYTES`: the worker)."""
        fast = self.fast
        if (
            fast is not None
            and size <= SHORT_BYTES
            and not self._checkpointing  # meanwhile the worker writes, after it
            and self._fast_lock.acquire(blocking=False)
        ):
            try:
                result = _attempt(fast, work, self.path, busy=True)
            except _Busy:
                pass
            else:
                self._wrote()
                return result
            finally:
                self._fast_lock.release()
        return await self.call(work)

    def _wrote(self) -> None:
        self._writes += 1
        if self._writes >= CHECKPOINT_EVERY and not self._checkpointing:
            self._writes = 0
            self._checkpointing = True  # one asked at a time; the worker clears it
            self._executor.submit(self._checkpoint_now)


def _open(path: Path) -> sqlite3.Connection:
    try:
        return sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise StoreUnavailable(f"cannot open the SQLite file {str(path)!r}: {exc}") from exc


def _attempt(
    db: sqlite3.Connection,
    work: Callable[[sqlite3.Connection], _T],
    path: Path,
    *,
    busy: bool = False,
) -> _T:
    """``work(db)``, its transaction rolled back if it raises, SQLite's errors translated
    (``busy``: SQLITE_BUSY raised as :class:`_Busy`, for the worker to try again)."""
    try:
        return work(db)
    except sqlite3.IntegrityError as exc:
        _rollback(db)
        raise InvalidMessage(f"a message or steer id is already in the session: {exc}") from exc
    except sqlite3.Error as exc:
        _rollback(db)
        if busy and getattr(exc, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_BUSY:
            raise _Busy from exc
        raise StoreUnavailable(f"SQLite file {str(path)!r}: {exc}") from exc
    except BaseException:
        _rollback(db)
        raise


def _rollback(db: sqlite3.Connection) -> None:
    if db.in_transaction:
        db.rollback()
