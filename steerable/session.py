"""A session: one conversation of a store, already addressed by its id.

Open one with :func:`open_session` and put it in ``Spec(session=...)``; the loop then saves
the transcript before every model request and takes the session's steers at every step.
Anyone holding a session (another process, another machine, before any run exists) can
:meth:`Session.steer` it.

A session remembers how much of the transcript it has stored, so each save writes only
what is new. The first save of a session object that has not loaded the transcript checks
the stored messages against the ones it is given (one read): passing a transcript that
does not start with what is stored is a :class:`TranscriptConflict`, never a silent fork.

A session is the front door of its store: it checks every argument it is given (a
:class:`UsageError` otherwise) and the store trusts what it passes on.
"""

from __future__ import annotations

from collections.abc import Sequence

from steerable.errors import TranscriptConflict, UsageError
from steerable.messages import Message, ToolResult
from steerable.store import (
    CheckedStore,
    Steer,
    StepCounting,
    Store,
    as_steer,
    check_count,
    check_keys,
    check_messages,
    check_session_id,
    check_transcript,
    forkable,
    journaling,
    repairable,
    rewritable,
)


class Session:
    """One conversation of ``store``; see the module docstring."""

    __slots__ = ("_stored", "id", "store")

    def __init__(self, id: str, store: Store) -> None:
        self.id = check_session_id(id)
        if not isinstance(store, Store):
            raise UsageError(f"a Session needs a Store, not {type(store).__name__}")
        self.store = store
        self._stored: int | None = None

    def __repr__(self) -> str:
        return f"Session({self.id!r}, {type(self.store).__name__})"

    @property
    def stored(self) -> int | None:
        """How many messages this object knows to be stored, or None before it knows."""
        return self._stored

    async def messages(self) -> list[Message]:
        """The stored transcript, oldest first."""
        messages = await self.store.messages(self.id)
        self._stored = len(messages)
        return messages

    async def steer(self, text: str | Steer, *, id: str | None = None) -> Steer:
        """Leave a steer for the run working on this session (or the next one)."""
        steer = as_steer(text, id)
        await self.store.steer(self.id, steer)
        return steer

    async def steers(self) -> list[Steer]:
        """The steers waiting to be taken, oldest first."""
        return await self.store.steers(self.id)

    async def save(
        self, transcript: Sequence[Message], *, take: int = 0, last: bool = False
    ) -> list[Message]:
        """Store what ``transcript`` has beyond what is stored, and take up to ``take`` steers.

        Returns the steered messages taken; they are already recorded after ``transcript``
        in the store, and the caller appends them to its own copy. ``last``: the save of a
        run that reached ``max_steps``, which takes nothing and, where the store counts a
        turn's steps (:class:`~steerable.store.StepCounting`), is not counted as one.
        """
        check_count(take, "take")
        if last and take:
            raise UsageError("the last save of a run takes no steers (take=0)")
        check_transcript(transcript)
        # every message when the transcript is read against the store, else only the new
        # ones: a step's save costs what the step added, however long the transcript
        check_messages(transcript if self._stored is None else transcript[self._stored :])
        at = await self._position(transcript)
        new = transcript[at:]
        if not new and not take:
            return []
        counting = _step_counting(self.store) if last else None
        try:
            if counting is not None:
                await counting.save_last(self.id, new, at=at)
                taken = []
            else:
                taken = await self.store.save(self.id, new, at=at, take=take)
        except BaseException:
            # A save that failed (or whose answer was lost) may still have committed:
            # learn what is stored again before the next save.
            self._stored = None
            raise
        self._stored = at + len(new) + len(taken)
        return taken

    async def take_steers(self, *, limit: int = 16) -> list[Message]:
        """Take up to ``limit`` steers, recorded at the end of the stored transcript."""
        check_count(limit, "limit")
        # Taken steers land wherever the transcript ends, so the stored length is unknown
        # afterwards, whether the call returns, raises or loses its answer.
        self._stored = None
        return await self.store.take_steers(self.id, at=None, limit=limit)

    async def truncate(self, at: int, *, length: int | None = None) -> list[Message]:
        """Remove the stored messages at positions ``at`` and after; returns them, in order.

        With ``length``, nothing changes unless exactly ``length`` messages are stored
        (:class:`TranscriptConflict`). Refused with :class:`~steerable.errors.SessionBusy`
        while a turn of the service runs on the session. The store must be
        :class:`~steerable.store.Rewritable` (every store of this package is).
        """
        check_count(at, "at")
        if length is not None:
            check_count(length, "length")
        store = rewritable(self.store)
        self._stored = None
        removed = await store.truncate(self.id, at=at, length=length)
        self._stored = None if length is None else min(at, length)
        return removed

    async def delete(self) -> bool:
        """Forget this session's transcript, steers and service records; True if it had any.

        Refused with :class:`~steerable.errors.SessionBusy` while a turn of the service runs
        on it. The store must be :class:`~steerable.store.Rewritable`.
        """
        store = rewritable(self.store)
        self._stored = None
        deleted = await store.delete(self.id)
        self._stored = 0
        return deleted

    async def fork(self, new: str, *, at: str | None = None) -> Session:
        """A new session ``new`` whose transcript is this one's through the message ``at``
        (all of it when None), sharing nothing with it; run on it to carry the conversation
        on from that point (resume at a message). Steers waiting here stay here.

        :class:`~steerable.MessageNotFound` when ``at`` is not stored here,
        :class:`~steerable.SessionExists` when ``new`` has anything; the store must be
        :class:`~steerable.store.Forkable` (every store of this package is).
        """
        fresh = check_session_id(new)
        if fresh == self.id:
            raise UsageError("a session cannot be forked into itself")
        if at is not None and (not isinstance(at, str) or not at):
            raise UsageError(f"`at` is a message id (a non-empty str) or None, not {at!r}")
        copied = await forkable(self.store).fork(self.id, fresh, through=at)
        forked = Session(fresh, self.store)
        forked._stored = copied
        return forked

    async def begin_calls(self, keys: Sequence[str]) -> dict[str, ToolResult | None]:
        """Mark tool calls started in the session's journal; what it knew of them before
        (see :class:`~steerable.store.Journaling`)."""
        return await journaling(self.store).begin_calls(self.id, check_keys(keys))

    async def end_call(self, key: str, result: ToolResult) -> ToolResult:
        """Record a tool call's result in the journal; the first recorded is returned."""
        (checked,) = check_keys([key])
        if not isinstance(result, ToolResult):
            raise UsageError(f"end_call records a ToolResult, not {type(result).__name__}")
        return await journaling(self.store).end_call(self.id, checked, result)

    async def replace(self, at: int, old: Sequence[str], messages: Sequence[Message]) -> None:
        """Put ``messages`` in place of the stored messages from ``at`` on, if their ids are
        ``old`` (:class:`TranscriptConflict` otherwise; see
        :class:`~steerable.store.Repairable`)."""
        check_count(at, "at")
        check_keys(old, what="old message id")
        check_messages(messages)
        store = repairable(self.store)
        self._stored = None
        await store.replace(self.id, at=at, old=old, messages=messages)
        self._stored = at + len(messages)

    async def _position(self, transcript: Sequence[Message]) -> int:
        if self._stored is not None:
            if self._stored > len(transcript):
                raise TranscriptConflict(self.id, len(transcript), self._stored)
            return self._stored
        stored = await self.store.messages(self.id)
        if len(stored) > len(transcript) or any(
            a.id != b.id for a, b in zip(stored, transcript, strict=False)
        ):
            raise TranscriptConflict(self.id, len(transcript), len(stored))
        self._stored = len(stored)
        return self._stored


def open_session(id: str, store: Store) -> Session:
    """The session ``id`` of ``store``. No I/O: a session nobody wrote to is empty."""
    return Session(id, store)


def _step_counting(store: Store) -> StepCounting | None:
    """``store`` (under its checks) as a store that counts steps, or None."""
    inner = store.inner if isinstance(store, CheckedStore) else store
    return inner if isinstance(inner, StepCounting) else None
