"""The MySQL store's :class:`steerable.store.Rewritable` verbs: cut a transcript, delete a session.

Each verb is one transaction (:meth:`MySQLServiceTables._atomic`) that takes the session's
two locks in the order every writer does, the service's row and then the core's:

1. The session's ``steerable_service`` row, made if missing and locked ``FOR UPDATE``:
   claims and every service write of the session queue behind it, so the check that no
   turn is running holds until the commit. A row the verb made and left empty (no epoch, no
   event) is removed again before the commit.
2. The core's ``steerable_sessions`` row, which every save (``steerable_save_v1``) and
   service step takes first: no save runs between the length check and the commit.

Both locks come before the transaction's first plain read, so it sees every write that
committed before it (REPEATABLE READ takes its snapshot there). A delete removes the
messages, the steers (waiting and taken), the inputs, turns and events; the service row
keeps its epoch and its events counter, so a stale holder stays fenced and event ids go on
after the old ones, and its counters of inputs and turns start again at 0.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from steerable import codec
from steerable.errors import SessionBusy, TranscriptConflict
from steerable.messages import Message
from steerable.stores.mysql._driver import MAX_AT, check_id, text_of
from steerable.stores.mysql._service import CORE_LOCK, Tx, length_of, locked

__all__ = ["MySQLRewritable"]

_T = TypeVar("_T")

_MAKE = (
    "INSERT INTO steerable_service (session) VALUES (%s) ON DUPLICATE KEY UPDATE session = session"
)

_UNMADE = (
    "DELETE FROM steerable_service WHERE session = %s AND epoch = 0 AND events = 0 AND inputs = 0"
)

_RESET = (
    "UPDATE steerable_service SET holder = NULL, expires = NULL, running = NULL, queued = 0,"
    " inputs = 0, turns = 0 WHERE session = %s"
)

# what a delete forgets; the messages and the steers count toward "there was something"
_FORGET = ("steerable_messages", "steerable_steers", "steerable_inputs")
_ALSO = ("steerable_turns", "steerable_events")


class MySQLRewritable:
    """The :class:`steerable.store.Rewritable` verbs of :class:`MySQLStore`."""

    # provided by MySQLServiceTables
    async def _atomic(
        self, session: str, work: Callable[[Tx], Awaitable[_T]], *, at: int | None = None
    ) -> _T:
        raise NotImplementedError

    async def truncate(self, session: str, *, at: int, length: int | None = None) -> list[Message]:
        """Remove the messages at positions ``at`` and after; returns them, in order.

        With ``length``, :class:`TranscriptConflict` unless exactly ``length`` messages are
        stored; :class:`SessionBusy` while a service turn runs. Either changes nothing.
        """
        check_id(session, "session id")
        first = min(at, MAX_AT)

        async def cut(tx: Tx) -> list[Message]:
            await _lock(tx, session, "cut")
            stored = await length_of(tx, session)
            if length is not None and length != stored:
                raise TranscriptConflict(session, length, stored)
            rows = await tx.rows(
                "SELECT position, id, body FROM steerable_messages"
                " WHERE session = %s AND position >= %s ORDER BY position",
                (session, first),
            )
            await tx.run(
                "DELETE FROM steerable_messages WHERE session = %s AND position >= %s",
                (session, first),
            )
            await tx.run(_UNMADE, (session,))
            return [
                codec.decode(text_of(id), body, where=f"session {session!r}, position {position}")
                for position, id, body in rows
            ]

        return await self._atomic(session, cut)

    async def delete(self, session: str) -> bool:
        """Forget the session's transcript, steers and service records; True if it had any.

        :class:`SessionBusy` while a service turn runs on it, changing nothing.
        """
        check_id(session, "session id")

        async def forget(tx: Tx) -> bool:
            await _lock(tx, session, "deleted")
            found = 0
            for table in _FORGET:
                found += await tx.run(f"DELETE FROM {table} WHERE session = %s", (session,))
            for table in _ALSO:
                await tx.run(f"DELETE FROM {table} WHERE session = %s", (session,))
            await tx.run(_RESET, (session,))
            await tx.run(_UNMADE, (session,))
            return found > 0

        return await self._atomic(session, forget)


async def _lock(tx: Tx, session: str, what: str) -> None:
    """Hold the session's service row, then the core's; :class:`SessionBusy` if a turn runs."""
    await tx.run(_MAKE, (session,))
    svc = await locked(tx, session)
    if svc is not None and svc.running is not None:
        raise SessionBusy(session, svc.running, what)
    await tx.run(CORE_LOCK, (session,))
