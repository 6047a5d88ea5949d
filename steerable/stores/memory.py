"""A store in this process's memory: for tests, demos and single-process use.

Everything is lost when the process ends. Every verb does its work without awaiting, so
each is atomic on the event loop; a lock makes it atomic across threads too. Like every
store it trusts its arguments' types (:class:`steerable.Session` and
:class:`steerable.store.CheckedStore` check them).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from steerable import codec
from steerable.errors import InvalidMessage, TranscriptConflict
from steerable.messages import Message
from steerable.store import Steer
from steerable.stores._memory_service import MemoryServiceTables

__all__ = ["MemoryStore"]


@dataclass
class _Session:
    transcript: list[Message] = field(default_factory=list)
    ids: set[str] = field(default_factory=set)
    waiting: dict[str, Steer] = field(default_factory=dict)  # insertion ordered
    seen: set[str] = field(default_factory=set)  # every steer id ever left


class MemoryStore(MemoryServiceTables):
    """A :class:`steerable.Store` (and :class:`~steerable.store.Rewritable`) and a service
    store, held in dicts."""

    def __init__(self) -> None:
        self._sessions: dict[str, _Session] = {}
        self._lock = threading.Lock()
        self._service_init()

    def _transcript(self, session: str) -> tuple[list[Message], set[str]]:
        state = self._get(session)
        return state.transcript, state.ids

    def _get(self, session: str) -> _Session:
        state = self._sessions.get(session)
        if state is None:
            state = self._sessions[session] = _Session()
        return state

    async def messages(self, session: str) -> list[Message]:
        """The session's transcript, in position order (empty for a new session)."""
        with self._lock:
            state = self._sessions.get(session)
            return list(state.transcript) if state else []

    async def save(
        self, session: str, messages: Sequence[Message], *, at: int, take: int = 0
    ) -> list[Message]:
        """Append ``messages`` at position ``at``, then take up to ``take`` steers; atomic."""
        for message in messages:
            codec.encode(message)  # refuse what a persistent store would refuse
        with self._lock:
            return self._append(session, messages, at, take)

    async def take_steers(self, session: str, *, at: int | None, limit: int) -> list[Message]:
        """Take up to ``limit`` steers and record them at ``at`` (or at the end); atomic."""
        with self._lock:
            return self._append(session, (), at, limit)

    def _append(
        self, session: str, messages: Sequence[Message], at: int | None, take: int
    ) -> list[Message]:
        state = self._get(session)
        if at is not None and at != len(state.transcript):
            raise TranscriptConflict(session, at, len(state.transcript))
        ids = [m.id for m in messages]
        if len(set(ids)) != len(ids) or not state.ids.isdisjoint(ids):
            raise InvalidMessage(f"session {session!r}: a message id is already in the transcript")
        taken: list[Message] = []
        for steer_id in list(state.waiting)[:take]:
            steer = state.waiting.pop(steer_id)
            if steer_id not in state.ids and steer_id not in ids:  # else recorded already
                taken.append(steer.message())
        state.transcript.extend(messages)
        state.transcript.extend(taken)
        state.ids.update(ids)
        state.ids.update(m.id for m in taken)
        return taken

    async def steer(self, session: str, steer: Steer) -> None:
        """Leave ``steer`` in the session's box; a steer id seen before is ignored."""
        with self._lock:
            state = self._get(session)
            if steer.id not in state.seen:
                state.seen.add(steer.id)
                state.waiting[steer.id] = steer

    async def steers(self, session: str) -> list[Steer]:
        """The steers waiting in the session's box, oldest first."""
        with self._lock:
            state = self._sessions.get(session)
            return list(state.waiting.values()) if state else []

    async def truncate(self, session: str, *, at: int, length: int | None = None) -> list[Message]:
        """Remove the messages at positions ``at`` and after; returns them, in order."""
        with self._lock:
            self._busy(session, "cut")
            state = self._sessions.get(session)
            stored = state.transcript if state else []
            if length is not None and length != len(stored):
                raise TranscriptConflict(session, length, len(stored))
            if state is None:
                return []
            removed = state.transcript[at:]
            del state.transcript[at:]
            state.ids.difference_update(m.id for m in removed)
            return removed

    async def delete(self, session: str) -> bool:
        """Forget the session's transcript, steers and service records; True if it had any."""
        with self._lock:
            self._busy(session, "deleted")
            state = self._sessions.pop(session, None)
            had = state is not None and bool(state.transcript or state.seen)
            return self._forget_service(session) or had
