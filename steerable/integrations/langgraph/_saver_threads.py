"""The threads of one :class:`SteerableSaver` as stored: a checked cache and atomic writes.

Each thread is one session of the store (``prefix`` + thread id) holding the append-only
log of :mod:`._saver_log`. :class:`Threads` keeps each thread's folded log in the process,
reads it through a check that nobody wrote since, and appends a write's records in one
``Store.save`` at the position it last saw, rebuilding them on a conflict; a thread's
first write in a process notes it in the saver's index of threads (:mod:`._saver_index`)
before its records are stored. This is everything the saver asks of the store; LangGraph's
interface is in :mod:`._saver`. Its state (the logs kept, the locks) belongs to one event
loop: the saver keeps one :class:`Threads` per loop it runs on.
"""

from __future__ import annotations

import asyncio
import random
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from steerable.errors import StoreError, TranscriptConflict
from steerable.integrations.langgraph._saver_index import ThreadIndex
from steerable.integrations.langgraph._saver_log import ThreadLog
from steerable.messages import Message
from steerable.store import Store, check_session_id

_ATTEMPTS = 16  # saves lost to other writers before giving up: each one reloads the thread
_BACKOFF = 0.002  # seconds: the first pause after a lost save, doubled each time, jittered

Lists = list[tuple[str, str, str, list[Any]]]
"""The list values a write stores, ``(ns, channel, version, items)``: the next base."""

Build = Callable[[ThreadLog], tuple[list[Message], Lists]]
"""A write: its records built against the thread's log as last seen, and its lists."""


class Threads:
    """Each thread's log, as stored now: read through a checked cache, written atomically.

    ``cache`` is how many threads' logs are kept; ``index`` is the saver's index of
    threads (None for the prefix ``""``, which has no session of its own to keep one in).
    """

    def __init__(self, store: Store, prefix: str, cache: int) -> None:
        self.store = store
        self.prefix = prefix
        self.cache = cache
        self.index = ThreadIndex(store, prefix) if prefix else None
        self._logs: OrderedDict[str, ThreadLog] = OrderedDict()
        self._locks: dict[str, asyncio.Lock] = {}

    def _session(self, thread: str) -> str:
        return check_session_id(self.prefix + thread)

    def _lock(self, session: str) -> asyncio.Lock:
        lock = self._locks.get(session)
        if lock is None:
            lock = self._locks[session] = asyncio.Lock()
        return lock

    async def _load(self, session: str) -> ThreadLog:
        """The session's log, read and folded anew, and kept for the next call."""
        self._logs.pop(session, None)
        log = ThreadLog()
        log.apply(await self.store.messages(session))
        self._logs[session] = log
        while len(self._logs) > self.cache:
            evicted, _ = self._logs.popitem(last=False)
            lock = self._locks.get(evicted)
            if lock is not None and not lock.locked():
                del self._locks[evicted]
        return log

    async def read(self, thread: str) -> ThreadLog:
        """The thread's log as stored now: the kept one if nobody wrote since, else reloaded."""
        session = self._session(thread)
        async with self._lock(session):
            log = self._logs.get(session)
            if log is not None:
                try:
                    await self.store.save(session, [], at=log.length)
                except TranscriptConflict:
                    pass
                else:
                    self._logs.move_to_end(session)
                    return log
            return await self._load(session)

    async def write(self, thread: str, build: Build) -> None:
        """Append ``build(log)``'s records in one save; rebuilt on a conflict, a few times."""
        session = self._session(thread)
        async with self._lock(session):
            log = self._logs.get(session)
            if log is None:
                log = await self._load(session)
            for attempt in range(_ATTEMPTS):
                records, lists = build(log)
                if not records:
                    return
                if self.index is not None:
                    await self.index.add(thread)
                try:
                    await self.store.save(session, records, at=log.length)
                except TranscriptConflict:
                    # a writer that reloads while the other keeps writing loses every time:
                    # a random pause lets one of them through
                    await asyncio.sleep(random.uniform(0, _BACKOFF * 2 ** min(attempt, 8)))
                    log = await self._load(session)
                    continue
                except BaseException:
                    # stored whole or not at all, nobody knows which yet: read it next time
                    self._logs.pop(session, None)
                    raise
                log.apply(records)
                for ns, channel, key, items in lists:
                    log.values[(ns, channel)] = (key, items)
                self._logs.move_to_end(session)
                return
        raise StoreError(
            f"thread {thread!r}: {_ATTEMPTS} saves in a row lost to other writers of its session"
        )
