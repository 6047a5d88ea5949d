"""A store in this process's memory: for tests, demos and single-process use.

Everything is lost when the process ends. Every verb does its work without awaiting, so
each is atomic on the event loop; a lock makes it atomic across threads too. Like every
store it trusts its arguments' types (:class:`steerable.Session` and
:class:`steerable.store.CheckedStore` check them).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from steerable import codec
from steerable.errors import InvalidMessage, MessageNotFound, SessionExists, TranscriptConflict
from steerable.journal import encode_result
from steerable.messages import Message, ToolResult, new_id
from steerable.store import Steer
from steerable.stores._memory_leases import MemoryLeases

__all__ = ["MemoryStore"]


@dataclass
class _Session:
    transcript: list[Message] = field(default_factory=list)
    times: list[float] = field(default_factory=list)  # when each message was stored
    ids: set[str] = field(default_factory=set)
    waiting: dict[str, Steer] = field(default_factory=dict)  # insertion ordered
    seen: set[str] = field(default_factory=set)  # every steer id ever left
    journal: dict[str, ToolResult | None] = field(default_factory=dict)  # call key: result
    mark: str = field(default_factory=new_id)  # new whenever a stored message is cut or changed


class MemoryStore(MemoryLeases):
    """A :class:`steerable.Store` (:class:`~steerable.store.Rewritable`,
    :class:`~steerable.store.Forkable`, :class:`~steerable.store.Journaling` and
    :class:`~steerable.store.Repairable`) and a service store, held in dicts."""

    def __init__(self) -> None:
        self._sessions: dict[str, _Session] = {}
        self._lock = threading.Lock()
        self._service_init()

    def _transcript(self, session: str) -> tuple[list[Message], set[str]]:
        state = self._get(session)
        return state.transcript, state.ids

    def _times(self, session: str) -> list[float]:
        return self._get(session).times

    def _mark(self, session: str) -> str:
        return self._get(session).mark

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
        state.times.extend([time.time()] * (len(messages) + len(taken)))
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
            state.mark = new_id()
            del state.transcript[at:]
            del state.times[at:]
            state.ids.difference_update(m.id for m in removed)
            return removed

    async def delete(self, session: str) -> bool:
        """Forget the session's transcript, steers and service records; True if it had any."""
        with self._lock:
            self._busy(session, "deleted")
            state = self._sessions.pop(session, None)
            had = state is not None and bool(state.transcript or state.seen)
            return self._forget_service(session) or had

    async def fork(self, session: str, new: str, *, through: str | None = None) -> int:
        """Start ``new`` with ``session``'s transcript through message ``through``."""
        with self._lock:
            state = self._sessions.get(session)
            stored = state.transcript if state else []
            count = len(stored)
            if through is not None:
                found = [i for i, m in enumerate(stored) if m.id == through]
                if not found:
                    raise MessageNotFound(session, through)
                count = found[0] + 1
            target = self._sessions.get(new)
            if (target is not None and (target.transcript or target.seen)) or self._has_service(
                new
            ):
                raise SessionExists(new)
            if count:
                copied = _Session(list(stored[:count]), list(state.times[:count]) if state else [])
                copied.ids = {m.id for m in copied.transcript}
                self._sessions[new] = copied
            return count

    async def begin_calls(self, session: str, keys: Sequence[str]) -> dict[str, ToolResult | None]:
        """Mark each call started unless the journal knows it; what it knew, by key."""
        with self._lock:
            journal = self._get(session).journal
            known = {key: journal[key] for key in keys if key in journal}
            journal.update((key, None) for key in keys if key not in known)
            return known

    async def end_call(self, session: str, key: str, result: ToolResult) -> ToolResult:
        """Record call ``key``'s result; the first recorded wins and is returned."""
        encode_result(key, result)  # refuse what a persistent store would refuse
        with self._lock:
            journal = self._get(session).journal
            kept = journal.get(key)
            if kept is None:
                kept = journal[key] = result
            return kept

    async def replace(
        self, session: str, *, at: int, old: Sequence[str], messages: Sequence[Message]
    ) -> None:
        """Swap the tail at ``at`` for ``messages`` if its ids are ``old``; atomic."""
        for message in messages:
            codec.encode(message)
        with self._lock:
            state = self._get(session)
            tail = [m.id for m in state.transcript[at:]]
            if at > len(state.transcript) or tail != list(old):
                raise TranscriptConflict(session, at + len(old), len(state.transcript))
            kept = {m.id for m in state.transcript[:at]}
            ids = [m.id for m in messages]
            if len(set(ids)) != len(ids) or not kept.isdisjoint(ids):
                raise InvalidMessage(
                    f"session {session!r}: a message id is already in the transcript"
                )
            del state.transcript[at:]
            del state.times[at:]
            state.mark = new_id()
            state.transcript.extend(messages)
            state.times.extend([time.time()] * len(messages))
            state.ids = kept | set(ids)
