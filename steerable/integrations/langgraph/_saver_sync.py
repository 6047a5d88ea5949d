"""How :class:`SteerableSaver`'s sync methods run its async ones: on which event loop.

LangGraph calls a checkpointer's sync methods from ``graph.invoke`` and ``get_state`` in a
plain program (no loop running), from its worker threads, or from code on a loop's own
thread (a notebook). The saver's work is async, so each sync call runs it on a loop and
waits for it from the calling thread:

1. the saver's *home* loop (the one it was made on, else the last one its async methods
   ran on) while it runs, from any thread but its own: a store whose pool is bound to that
   loop (asyncpg, aiomysql, pymongo) is used where it lives;
2. else, for a store bound to no loop (:class:`MemoryStore`, :class:`SQLiteStore`), a
   loop of this module's own, in a daemon thread, started on first need (one per process);
3. else a :class:`UsageError` at once, naming what to do: such a store is bound to the loop
   it was first used on, and that loop is gone (``asyncio.run`` returned) or is the
   calling thread's own, which a sync call would block.

State kept per loop (the saver's checked cache and its locks) is in :mod:`._saver`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from steerable.errors import UsageError
from steerable.store import CheckedStore, Store
from steerable.stores.memory import MemoryStore
from steerable.stores.sqlite import SQLiteStore

T = TypeVar("T")

_own: asyncio.AbstractEventLoop | None = None
_own_lock = threading.Lock()


def bound_to_no_loop(store: Store) -> bool:
    """Whether ``store`` works on any event loop (its I/O is in threads, or there is none)."""
    while isinstance(store, CheckedStore):
        store = store.inner
    return isinstance(store, MemoryStore | SQLiteStore)


def own_loop() -> asyncio.AbstractEventLoop:
    """This module's loop, running in a daemon thread (started on the first call)."""
    global _own
    with _own_lock:
        if _own is None or _own.is_closed():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(
                target=loop.run_forever, name="steerable-langgraph-saver", daemon=True
            )
            thread.start()
            _own = loop
        return _own


def _running() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class SyncCalls:
    """Runs a saver's coroutines for its sync methods, on the loop the rules above pick.

    ``home`` is the loop the saver was made on (if one was running) and, after that, the
    last loop its async methods ran on (:meth:`used`).
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self.free = bound_to_no_loop(store)
        self.home: asyncio.AbstractEventLoop | None = _running()

    def used(self, loop: asyncio.AbstractEventLoop) -> None:
        """Note that the async methods ran on ``loop``: the next sync call goes there."""
        self.home = loop

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        """``work``'s result, run on the chosen loop and waited for from this thread."""
        try:
            loop = self._pick()
        except BaseException:
            work.close()
            raise
        return asyncio.run_coroutine_threadsafe(work, loop).result()

    def _pick(self) -> asyncio.AbstractEventLoop:
        here = _running()
        home = self.home
        if home is not None and home is not here and home.is_running():
            return home
        if self.free:
            loop = own_loop()
            if loop is here:  # only the saver's own coroutines run there: never reached
                raise UsageError("SteerableSaver's sync methods cannot run on its own loop")
            return loop
        kind = type(self.store).__name__
        if here is not None:
            why = f"this thread runs an event loop, and {kind} is bound to one: a sync call"
            why += " here would block the loop it needs"
        else:
            why = f"{kind} is bound to the event loop it was first used on, and no loop the"
            why += " saver knows is running now (did an asyncio.run() return?)"
        raise UsageError(
            f"SteerableSaver's sync methods (graph.invoke, get_state) cannot run: {why}. Use"
            " the async ones (ainvoke, aget_state) on that loop; or call the sync ones from"
            " another thread while the loop that made the store runs; or give the saver a"
            " store bound to no loop (SQLiteStore, MemoryStore)"
        )
