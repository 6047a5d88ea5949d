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

Two more abilities, each a small protocol of its own (every store of this package has both):

- :class:`Journaling`, the tool journal: ``begin_calls(session, keys)`` marks each call
  (by its idempotency key) started unless the journal knows it, and answers what the
  journal held before for the keys it knew (``None`` for a call started and never ended,
  its :class:`~steerable.messages.ToolResult` for one that ended); a key missing from the
  answer was marked started by this call and no other. ``end_call(session, key, result)``
  records a call's result; the first result recorded wins and is returned. Each is atomic
  per key, so of many callers racing to begin one call exactly one is told it is new.
  ``delete`` forgets a session's journal; ``fork`` does not copy it; ``truncate`` leaves it.
- :class:`Repairable`: ``replace(session, at=n, old=ids, messages=...)`` swaps the messages
  at positions ``n`` and after for ``messages`` if, and only if, the stored ones there are
  exactly those whose ids are ``old``, in order, with nothing after (a compare-and-swap of
  the tail); else :class:`TranscriptConflict` and nothing changes. It is not refused while
  a service turn runs: the repair of orphaned tool calls (:mod:`steerable.repair`) writes
  it at a turn's start, and any write that came between the read and the swap makes it a
  conflict, so it never loses one.

A store trusts its arguments to have the types above (a non-empty ``str`` session id,
``Message`` and ``Steer`` objects, ints >= 0): :class:`steerable.Session` and
:class:`CheckedStore` check them at the front door, once, and raise :class:`UsageError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from steerable.errors import UsageError
from steerable.messages import Message, Text, ToolResult, new_id


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


@runtime_checkable
class Forkable(Protocol):
    """The ability to start a session from another's transcript, up to a message."""

    async def fork(self, session: str, new: str, *, through: str | None = None) -> int:
        """Start ``new`` with ``session``'s transcript up to and including the message
        ``through`` (all of it when None); how many messages it copied.

        The copies keep their ids, parts, ``steered`` marks and stored times, at the same
        positions. Nothing else comes along: no steers, inputs, turns, events or metadata,
        and nothing is shared (a save to either session never shows in the other). One
        atomic operation: ``new`` has all of them or none. Refused, nothing written, with
        :class:`~steerable.errors.MessageNotFound` when ``through`` is not in the
        transcript (checked first), and :class:`~steerable.errors.SessionExists` when
        ``new`` has anything (a transcript, steers, inputs or metadata). A running turn on
        ``session`` does not stop it: the fork copies what is stored.
        """
        ...


@runtime_checkable
class Journaling(Protocol):
    """The tool journal's two verbs; see the module docstring."""

    async def begin_calls(self, session: str, keys: Sequence[str]) -> dict[str, ToolResult | None]:
        """Mark each call of ``keys`` started unless the journal knows it; atomic per key.

        The answer holds the keys the journal knew before: ``None`` for a call started and
        not ended, its result for one that ended. A key not in it is new, started now.
        """
        ...

    async def end_call(self, session: str, key: str, result: ToolResult) -> ToolResult:
        """Record ``result`` as call ``key``'s (begun or not); the first recorded wins and
        is returned."""
        ...


@runtime_checkable
class Repairable(Protocol):
    """The ability to swap a transcript's tail for another, compared and swapped at once."""

    async def replace(
        self, session: str, *, at: int, old: Sequence[str], messages: Sequence[Message]
    ) -> None:
        """Put ``messages`` at positions ``at`` and after, in place of the stored messages
        there, if those are exactly the ones whose ids are ``old`` (in order, none after).

        :class:`TranscriptConflict` otherwise, nothing written. The new messages may reuse
        ids of the old ones; no id may be one of the messages before ``at``.
        """
        ...


@runtime_checkable
class StepCounting(Protocol):
    """A store that counts a turn's steps (the service's, for the turn it runs), and so is
    told when a save is the last of a run that reached ``max_steps``: no model request
    follows it, so it is no step."""

    async def save_last(self, session: str, messages: Sequence[Message], *, at: int) -> None:
        """``save(session, messages, at=at, take=0)``, not counted as a step."""
        ...


def journaling(store: Store) -> Journaling:
    """``store`` as a :class:`Journaling`, or a :class:`UsageError` saying it cannot be."""
    inner = store.inner if isinstance(store, CheckedStore) else store
    if not isinstance(inner, Journaling):
        raise UsageError(
            f"{type(inner).__name__} keeps no tool journal (it has no begin_calls/end_call:"
            " see steerable.store.Journaling), so a tool with side effects cannot run on it"
        )
    return inner


def repairable(store: Store) -> Repairable:
    """``store`` as a :class:`Repairable`, or a :class:`UsageError` saying it cannot be."""
    inner = store.inner if isinstance(store, CheckedStore) else store
    if not isinstance(inner, Repairable):
        raise UsageError(
            f"{type(inner).__name__} cannot replace a transcript's tail (it has no replace:"
            " see steerable.store.Repairable)"
        )
    return inner


def forkable(store: Store) -> Forkable:
    """``store`` as a :class:`Forkable`, or a :class:`UsageError` saying it cannot be."""
    inner = store.inner if isinstance(store, CheckedStore) else store
    if not isinstance(inner, Forkable):
        raise UsageError(
            f"{type(inner).__name__} cannot fork a session (it has no fork: see"
            " steerable.store.Forkable)"
        )
    return inner


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


def check_keys(keys: object, *, what: str = "call key") -> Sequence[str]:
    """``keys`` if it is a sequence of non-empty str without NUL, unique, else a
    :class:`UsageError` naming ``what``."""
    if isinstance(keys, str | bytes) or not isinstance(keys, Sequence):
        raise UsageError(f"{what}s are a sequence of str, not {type(keys).__name__}")
    sequence: Sequence[Any] = keys
    for key in sequence:
        if not isinstance(key, str) or not key or "\x00" in key:
            raise UsageError(f"a {what} is a non-empty str without NUL, not {key!r}")
    if len(set(sequence)) != len(sequence):
        raise UsageError(f"a {what} appears twice in {list(sequence)!r}")
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

    async def begin_calls(self, session: str, keys: Sequence[str]) -> dict[str, ToolResult | None]:
        """Mark calls started in the tool journal (see :class:`Journaling`)."""
        sid = check_session_id(session)
        return await journaling(self.inner).begin_calls(sid, check_keys(keys))

    async def end_call(self, session: str, key: str, result: ToolResult) -> ToolResult:
        """Record a call's result in the tool journal (see :class:`Journaling`)."""
        sid = check_session_id(session)
        (checked,) = check_keys([key])
        if not isinstance(result, ToolResult):
            raise UsageError(f"end_call records a ToolResult, not {type(result).__name__}")
        return await journaling(self.inner).end_call(sid, checked, result)

    async def replace(
        self, session: str, *, at: int, old: Sequence[str], messages: Sequence[Message]
    ) -> None:
        """Swap the transcript's tail, compared and swapped at once (see :class:`Repairable`)."""
        sid = check_session_id(session)
        check_count(at, "at")
        check_keys(old, what="old message id")
        check_messages(messages)
        await repairable(self.inner).replace(sid, at=at, old=old, messages=messages)
