"""The errors of :class:`~._sessions.SteerableSessionService`: steerable's and ADK's at once.

ADK's callers catch ADK's own types (its runner discards a stale compaction on
``StaleSessionError``; code written for ``DatabaseSessionService`` catches
``SessionNotFoundError``, or the ``ValueError`` both derive from); steerable's callers catch
steerable's. Each error here is both, so either ``except`` catches it::

    StaleSession      TranscriptConflict (StoreError) and ADK's StaleSessionError
    SessionNotFound   StoreError and ADK's SessionNotFoundError
    NoUserState       UsageError and NotImplementedError (what ADK's base class raises)
"""

from __future__ import annotations

from google.adk.errors import StaleSessionError
from google.adk.errors.session_not_found_error import SessionNotFoundError

from steerable.errors import StoreError, TranscriptConflict, UsageError

__all__ = ["NoUserState", "SessionNotFound", "StaleSession"]


class StaleSession(TranscriptConflict, StaleSessionError):
    """An append to a session object older than what is stored (another writer appended
    since it was loaded, or another object of the same session did). Nothing was stored;
    get the session again and append to that."""

    def __init__(self, session_id: str, expected: int, stored: int) -> None:
        super().__init__(session_id, expected, stored)
        self.args = (
            f"ADK session {session_id!r} has been modified in storage since it was loaded"
            f" (the object is at revision {expected}, the store at {stored}); get the"
            " session again before appending more events",
        )


class SessionNotFound(StoreError, SessionNotFoundError):
    """An append to a session that is not stored (never created, or deleted since)."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(f"ADK session {session_id!r} not found (never created, or deleted)")


class NoUserState(UsageError, NotImplementedError):
    """``get_user_state`` of a service over ``session_for``: it has no state across sessions
    (ADK's callers catch the ``NotImplementedError`` and read the sessions instead)."""
