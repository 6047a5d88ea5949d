"""One caller at a time on a session object: tasks of one event loop in call order, and
callers on other threads' loops (``Runner.run_sync`` in a thread, say) after them.

An :class:`asyncio.Lock` is first in, first out, so ten ``add_items`` started together keep
their order; it serves one loop only, so each loop gets its own, and a thread lock keeps two
loops from interleaving. A loop that finds the thread lock held waits for it on a worker
thread (never blocking the loop); a wait cancelled meanwhile lets go of the lock as soon as
that thread gets it.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from types import TracebackType

__all__ = ["Serial"]


class Serial:
    """An async context manager that admits one holder at a time (see the module)."""

    __slots__ = ("_guard", "_held", "_locks")

    def __init__(self) -> None:
        self._guard = threading.Lock()  # guards the map of locks, never held across an await
        self._held = threading.Lock()
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )

    def _lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        with self._guard:
            lock = self._locks.get(loop)
            if lock is None:
                lock = self._locks[loop] = asyncio.Lock()
            return lock

    async def __aenter__(self) -> None:
        lock = self._lock()
        await lock.acquire()
        try:
            if not self._held.acquire(blocking=False):
                await self._held_elsewhere()
        except BaseException:
            lock.release()
            raise

    async def _held_elsewhere(self) -> None:
        """Take the thread lock that another thread's loop holds, waiting off this loop."""
        got = asyncio.get_running_loop().run_in_executor(None, self._held.acquire)
        try:
            await asyncio.shield(got)
        except asyncio.CancelledError:
            got.add_done_callback(self._let_go)
            raise

    def _let_go(self, got: asyncio.Future[bool]) -> None:
        """A cancelled wait's lock, once its thread took it: taken for nobody, let go."""
        if not got.cancelled() and got.exception() is None:
            self._held.release()

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._held.release()
        self._lock().release()
