"""The store contract: a small async Protocol every backend implements.

A store keeps, per session id, a transcript (messages at positions 0, 1, 2, ...) and a steer
box (steers waiting to be taken, in the order they came). Its verbs take the session id;
:class:`steerable.Session` is the same verbs with the id already bound.

The contract (checked case by case by :mod:`steerable.testing`):

- ``messages`` returns the transcript exactly as saved, in position order; a session
  nobody wrote to is empty, not an error.
- ``save(session, messages, at=n)`` appends ``messages`` at positions ``n, n+1, ...``. It
  writes only what is new: its cost grows with ``messages``, not with the transcript. If
  the store does not hold exactly ``n`` messages (another writer got there first) it raises
  :class:`TranscriptConflict` and changes nothing; so does an empty save (``messages`` empty,
  ``take=0``), which is how a reader checks that its copy is still the whole transcript.
- ``save(..., take=k)`` then, in the same atomic operation, takes up to ``k`` waiting steers
  and appends each as a steered user message after ``messages``; it returns those messages.
  A crash can never leave a steer both taken and unrecorded, or recorded twice.
- ``take_steers(session, at=n, limit=k)`` is ``save(session, [], at=n, take=k)``;
  ``at=None`` appends wherever the transcript ends.
- ``steer`` with an id the session has seen before (waiting or already taken) does nothing.
  A waiting steer whose id is already a message of the transcript (it was recorded another
  way, say from a run's own box) is taken without being recorded or returned again.
- A save that fails, or whose answer is lost, is stored whole or not at all: load the
  transcript to learn which.
- Many concurrent takers (tasks, processes, replicas) get each steer exactly once.
- ``steers`` lists the steers still waiting, oldest first.

Every store of this package also has the :class:`Rewritable` verbs, an ability apart from the
five above (a store of someone else's may lack it; :func:`rewritable` checks):

- ``truncate(session, at=n, length=m)`` removes the messages at positions ``n`` and after
  and returns them, in order; with ``length`` given it first checks that the store holds
  exactly ``m`` messages (a :class:`TranscriptConflict` otherwise, changing nothing), so
  "remove the last message" cannot remove one another writer has just added. ``n`` past the
  end removes nothing. The ids of the removed messages may be saved again; the steer box is
  untouched (a steer id seen before stays seen).
- ``delete(session)`` forgets the session: its transcript, its steer box (waiting and seen
  ids), and where the store keeps the service's tables, its inputs, turns and durable
  events. The session is then as new, except that its fencing epoch and its event ids go on
  from where they were (a stale holder stays fenced, and an event follower's last id still
  means "after this"). It returns whether there was anything to forget.
- Both are refused with :class:`~steerable.errors.SessionBusy`, changing nothing, while a
  turn of the service is running on the session (claimed and not ended): the check and the
  change are one atomic operation.

A store trusts its arguments to have the types above (a non-empty ``str`` session id,
``Message`` and ``Steer`` objects, ints >= 0): :class:`steerable.Session` and
:class:`CheckedStore` check them at the front door, once, and raise :class:`UsageError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from steerable.errors import UsageError
from steerable.messages import Message, Text, new_id


@dataclass(frozen=True, slots=True)
class Steer:
    """A message sent to a session while (or before) a run works on it.

    ``id`` makes it idempotent: a steer sent twice with one id is one steer.
    """

    text: str
    id: str = field(default_factory=new_id)

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise UsageError(f"a steer's text is a str, not {type(self.text).__name__}")
        if not isinstance(self.id, str) or not self.id or "\x00" in self.id:
            raise UsageError(f"a steer id is a non-empty str without NUL, not {self.id!r}")

    def message(self) -> Message:
        """The steered user message that records this steer in a transcript."""
        return Message("user", (Text(self.text),), id=self.id, steered=True)


def as_steer(text: str | Steer, id: str | None = None) -> Steer:
    """``text`` if it is a :class:`Steer`, else a steer of it (under ``id``, or a new one).

    An ``id`` given is used as it is, so an empty one is refused rather than replaced.
    """
    if isinstance(text, Steer):
        return text
    return Steer(text) if id is None else Steer(text, id)


@runtime_checkable
class Store(Protocol):
    """A backend that keeps transcripts and steer boxes; see the module docstring."""

    async def messages(self, session: str) -> list[Message]:
        """The session's transcript, in position order (empty for a new session)."""
        ...

    async def save(
        self, session: str, messages: Sequence[Message], *, at: int, take: int = 0
    ) -> list[Message]:
        """Append ``messages`` at position ``at``, then take up to ``take`` steers; atomic."""
        ...

    async def steer(self, session: str, steer: Steer) -> None:
        """Leave ``steer`` in the session's box; a steer id seen before is ignored."""
        ...

    async def take_steers(self, session: str, *, at: int | None, limit: int) -> list[Message]:
        """Take up to ``limit`` steers and record them at ``at`` (or at the end); atomic."""
        ...

    async def steers(self, session: str) -> list[Steer]:
        """The steers waiting in the session's box, oldest first."""
        ...


@runtime_checkable
class Rewritable(Protocol):
    """The ability to cut a transcript back and to forget a session; see the module docstring."""

    async def truncate(self, session: str, *, at: int, length: int | None = None) -> list[Message]:
        """Remove the messages at positions ``at`` and after; returns them, in order.

        With ``length``, refuse with :class:`TranscriptConflict` unless exactly ``length``
        messages are stored. :class:`~steerable.errors.SessionBusy` while a service turn runs.
        """
        ...

    async def delete(self, session: str) -> bool:
        """Forget the session's transcript, steers and service records; True if it had any.

        :class:`~steerable.errors.SessionBusy` while a service turn runs on it.
        """
        ...


def rewritable(store: Store) -> Rewritable:
    """``store`` as a :class:`Rewritable`, or a :class:`UsageError` saying it cannot be."""
    inner = store.inner if isinstance(store, CheckedStore) else store
    if not isinstance(inner, Rewritable):
        raise UsageError(
            f"{type(inner).__name__} cannot cut a transcript or delete a session"
            " (it has no truncate/delete: see steerable.store.Rewritable)"
        )
    return inner


def check_session_id(session: object) -> str:
    """``session`` if it is a usable session id, else a :class:`UsageError` saying why."""
    if not isinstance(session, str):
        raise UsageError(f"a session id is a str, not {type(session).__name__}: {session!r}")
    if not session or "\x00" in session:
        raise UsageError(f"a session id is a non-empty str without NUL, not {session!r}")
    return session


def check_count(value: object, what: str) -> int:
    """``value`` if it is an int >= 0 (not a bool), else a :class:`UsageError` naming ``what``."""
    if type(value) is not int or value < 0:
        raise UsageError(f"`{what}` is an int >= 0, not {value!r}")
    return value


def check_transcript(messages: object) -> Sequence[Any]:
    """``messages`` if it is a sequence (not a str or bytes), else a :class:`UsageError`.

    Only the container: it can then be sliced and measured before its elements are checked.
    """
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
        raise UsageError(f"a transcript is a sequence of Message, not {type(messages).__name__}")
    return messages


def check_messages(messages: object) -> Sequence[Message]:
    """``messages`` if it is a sequence of :class:`Message`, else a :class:`UsageError`."""
    sequence = check_transcript(messages)
    for message in sequence:
        if not isinstance(message, Message):
            raise UsageError(f"a transcript holds Message objects, not {type(message).__name__}")
    return sequence


def check_save(
    session: object, messages: Sequence[Message], at: int | None, take: int, *, what: str = "take"
) -> str:
    """Validate the arguments of a save or take (``what`` names the count); returns the id."""
    sid = check_session_id(session)
    if at is not None:
        check_count(at, "at")
    check_count(take, what)
    check_messages(messages)
    return sid


def check_steer(session: object, steer: object) -> str:
    """Validate the arguments of ``Store.steer``; returns the session id."""
    sid = check_session_id(session)
    if not isinstance(steer, Steer):
        raise UsageError(f"Store.steer takes a Steer, not {type(steer).__name__}")
    return sid


class CheckedStore:
    """``store`` behind the front door: every argument is checked before the store sees it.

    A store trusts its input to be what the :class:`Store` protocol types say (a non-empty
    ``str`` session id, ``Message`` objects, counts that are ints >= 0); :class:`Session`
    checks what it is given, and so does this wrapper, for code that calls a store's verbs
    directly with values from outside (a request body, a command line). A bad argument is a
    :class:`UsageError` and reaches no store. What only the store can judge (a duplicate
    id, a lone surrogate, an id too long for its columns) the store still refuses.
    """

    __slots__ = ("inner",)

    def __init__(self, store: Store) -> None:
        if isinstance(store, CheckedStore):
            store = store.inner
        if not isinstance(store, Store):
            raise UsageError(f"CheckedStore wraps a Store, not {type(store).__name__}")
        self.inner: Store = store

    def __repr__(self) -> str:
        return f"CheckedStore({self.inner!r})"

    async def messages(self, session: str) -> list[Message]:
        """The session's transcript, in position order (empty for a new session)."""
        return await self.inner.messages(check_session_id(session))

    async def save(
        self, session: str, messages: Sequence[Message], *, at: int, take: int = 0
    ) -> list[Message]:
        """Append ``messages`` at position ``at``, then take up to ``take`` steers; atomic."""
        if at is None:
            raise UsageError("`at` of a save is a position (an int >= 0), not None")
        sid = check_save(session, messages, at, take)
        return await self.inner.save(sid, messages, at=at, take=take)

    async def steer(self, session: str, steer: Steer) -> None:
        """Leave ``steer`` in the session's box; a steer id seen before is ignored."""
        await self.inner.steer(check_steer(session, steer), steer)

    async def take_steers(self, session: str, *, at: int | None, limit: int) -> list[Message]:
        """Take up to ``limit`` steers and record them at ``at`` (or at the end); atomic."""
        sid = check_save(session, (), at, limit, what="limit")
        return await self.inner.take_steers(sid, at=at, limit=limit)

    async def steers(self, session: str) -> list[Steer]:
        """The steers waiting in the session's box, oldest first."""
        return await self.inner.steers(check_session_id(session))

    async def truncate(self, session: str, *, at: int, length: int | None = None) -> list[Message]:
        """Remove the messages at positions ``at`` and after (see :class:`Rewritable`)."""
        sid = check_session_id(session)
        check_count(at, "at")
        if length is not None:
            check_count(length, "length")
        return await rewritable(self.inner).truncate(sid, at=at, length=length)

    async def delete(self, session: str) -> bool:
        """Forget the session (see :class:`Rewritable`)."""
        return await rewritable(self.inner).delete(check_session_id(session))
