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
  :class:`TranscriptConflict` and changes nothing.
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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

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
        if not isinstance(self.id, str) or not self.id:
            raise UsageError(f"a steer id is a non-empty str, not {self.id!r}")

    def message(self) -> Message:
        """The steered user message that records this steer in a transcript."""
        return Message("user", (Text(self.text),), id=self.id, steered=True)


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


def check_session_id(session: object) -> str:
    """``session`` if it is a usable session id, else a :class:`UsageError` saying why."""
    if not isinstance(session, str):
        raise UsageError(f"a session id is a str, not {type(session).__name__}: {session!r}")
    if not session:
        raise UsageError("a session id is a non-empty str")
    return session


def check_save(session: object, messages: Sequence[Message], at: int | None, take: int) -> str:
    """Validate the arguments of a save or take; returns the session id."""
    sid = check_session_id(session)
    if at is not None and (type(at) is not int or at < 0):
        raise UsageError(f"`at` is a position (an int >= 0), not {at!r}")
    if type(take) is not int or take < 0:
        raise UsageError(f"`take` is a count (an int >= 0), not {take!r}")
    for message in messages:
        if not isinstance(message, Message):
            raise UsageError(f"a transcript holds Message objects, not {type(message).__name__}")
    return sid


def check_steer(session: object, steer: object) -> str:
    """Validate the arguments of ``Store.steer``; returns the session id."""
    sid = check_session_id(session)
    if not isinstance(steer, Steer):
        raise UsageError(f"Store.steer takes a Steer, not {type(steer).__name__}")
    return sid
