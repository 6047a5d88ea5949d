"""The threads one saver's ``prefix`` has written: ``list(None)`` lists their checkpoints.

A steerable store gives no listing of its sessions, so the saver keeps its own: one session
named ``prefix`` itself (no thread's session is: a thread id is never empty) holding one
record per thread, ``Native("langgraph-checkpoint-threads", {"thread": id})``, appended
before the thread's first record is stored. A crash between the two leaves a thread
indexed with nothing in it (listed as no checkpoint), never a thread stored but not
indexed. A process notes the thread again the first time it writes it, so a thread whose
last write predates the index (an earlier steerable) is listed once it is written again.
"""

from __future__ import annotations

import json

from steerable.errors import CorruptRecord, StoreError, TranscriptConflict
from steerable.messages import Message, Native
from steerable.store import Store

FRAMEWORK = "langgraph-checkpoint-threads"
"""The ``Native.framework`` of an index record (a thread's log ignores them)."""

_ATTEMPTS = 16  # saves of the index lost to other writers before giving up


class ThreadIndex:
    """The index session's threads as this process last read them, extended atomically."""

    def __init__(self, store: Store, session: str) -> None:
        self.store = store
        self.session = session
        self._length = 0
        self._read = False
        self._threads: dict[str, None] = {}  # in the order they were indexed

    async def threads(self) -> list[str]:
        """Every thread indexed, as stored now, in the order they were indexed."""
        await self._load()
        return list(self._threads)

    async def add(self, thread: str) -> None:
        """Index ``thread`` unless it is already (one save; reloaded on a conflict)."""
        if thread in self._threads:  # a copy that is behind lacks threads, never has extra
            return
        if not self._read:
            await self._load()
        body = json.dumps({"thread": thread}, separators=(",", ":"), ensure_ascii=False)
        entry = Message("assistant", (Native(FRAMEWORK, body, f"thread {thread}"),))
        for _ in range(_ATTEMPTS):
            if thread in self._threads:
                return
            try:
                await self.store.save(self.session, [entry], at=self._length)
            except TranscriptConflict:
                await self._load()
                continue
            self._fold([entry])
            return
        raise StoreError(f"the index of threads {self.session!r}: {_ATTEMPTS} saves lost in a row")

    async def _load(self) -> None:
        messages = await self.store.messages(self.session)
        self._threads = {}
        self._length = 0
        self._fold(messages)
        self._read = True

    def _fold(self, messages: list[Message]) -> None:
        for message in messages:
            for part in message.natives(FRAMEWORK):
                try:
                    thread = json.loads(part.data)["thread"]
                except (ValueError, KeyError, TypeError) as exc:
                    why = f"message {message.id!r} of {self.session!r}: not a thread record"
                    raise CorruptRecord(f"{why}: {exc!r}") from None
                if not isinstance(thread, str):
                    raise CorruptRecord(f"message {message.id!r}: a thread id {thread!r}")
                self._threads[thread] = None
        self._length += len(messages)
