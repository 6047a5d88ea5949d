"""The MySQL store's :class:`steerable.store.Rewritable` verbs (cut a transcript, delete a
session) and its :class:`steerable.store.Repairable` one (swap a transcript's tail).

Each verb is one transaction (:meth:`Transactions._atomic`) that takes the session's
two locks in the order every writer does, the service's row and then the core's:

1. The session's ``steerable_service`` row, made if missing and locked ``FOR UPDATE``:
   claims and every service write of the session queue behind it, so the check that no
   turn is running holds until the commit. The row gets a new ``mark`` (a row made here has
   one of its own), so no claimer takes what it held of the transcript for it after the
   commit. A row the verb made and left empty (no epoch, no event, no metadata) is removed
   again before the commit; the next row made for the session has a new mark.
2. The core's ``steerable_sessions`` row, which every save (``steerable_save_v3``) and
   service step takes first: no save runs between the length check and the commit.

A ``replace`` takes the same two locks in the same order, so it queues with saves, steps,
claims, cuts, deletes and forks of the session exactly as a cut does, but it is not
refused while a turn runs (the repair of orphaned calls writes it at a turn's start). Under
them it reads the tail from ``at`` (ids and stored times), compares the ids with ``old``
(:class:`TranscriptConflict` unless equal and ``at`` is within the transcript), deletes
the tail and inserts the new messages at ``at``, ``at + 1``, ... in one multi-row
``INSERT``; an id of a kept message, or one twice among the new, is the messages' unique
key refusing it (:class:`InvalidMessage`), rolled back whole. A new message that reuses
the id of a removed one keeps that one's stored time; the others are stored now. The
steer box (its taken ids stay seen), inputs, turns, events and the journal are untouched.

Both locks come before the transaction's first plain read, so it sees every write that
committed before it (REPEATABLE READ takes its snapshot there). A delete removes the
messages, the steers (waiting and taken), the inputs, turns, events and the session's
metadata; the service row keeps its epoch and its events counter, so a stale holder stays
fenced and event ids go on after the old ones, and its counters of inputs and turns start
again at 0.
"""

from __future__ import annotations

from collections.abc import Sequence

from steerable import codec
from steerable.errors import SessionBusy, TranscriptConflict
from steerable.messages import Message
from steerable.stores.mysql._driver import MAX_AT, check_id, text_of
from steerable.stores.mysql._schema import NEW_MARK, NOW
from steerable.stores.mysql._transaction import CORE_LOCK, Transactions, Tx, length_of, locked

__all__ = ["MySQLRepairable", "MySQLRewritable"]

# made with a new mark (the column's default), or given one: the transcript it holds is cut,
# changed or forked into
_MAKE = (
    f"INSERT INTO steerable_service (session) VALUES (%s) ON DUPLICATE KEY UPDATE mark = {NEW_MARK}"
)

_UNMADE = (
    "DELETE FROM steerable_service WHERE session = %s AND epoch = 0 AND events = 0 AND inputs = 0"
    " AND metadata IS NULL"
)

_RESET = (
    "UPDATE steerable_service SET holder = NULL, expires = NULL, running = NULL, queued = 0,"
    " inputs = 0, turns = 0, metadata = NULL WHERE session = %s"
)

# the tail a replace compares, with each message's stored time (kept for a reused id)
_TAIL = (
    "SELECT id, at FROM steerable_messages WHERE session = %s AND position >= %s ORDER BY position"
)
_CUT = "DELETE FROM steerable_messages WHERE session = %s AND position >= %s"
_PUT = "INSERT INTO steerable_messages (session, position, id, body, at) VALUES {}"

# what a delete forgets; the messages and the steers count toward "there was something"
_FORGET = ("steerable_messages", "steerable_steers", "steerable_inputs")
_ALSO = ("steerable_turns", "steerable_events", "steerable_journal")


class MySQLRewritable(Transactions):
    """The :class:`steerable.store.Rewritable` verbs of :class:`MySQLStore`."""

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
            await tx.run(_CUT, (session, first))
            await tx.run(_UNMADE, (session,))
            return [
                codec.decode(text_of(id), body, where=f"session {session!r}, position {position}")
                for position, id, body in rows
            ]

        return await self._atomic(session, cut)

    async def delete(self, session: str) -> bool:
        """Forget the session's transcript, steers, service records and metadata; True if it
        had any.

        :class:`SessionBusy` while a service turn runs on it, changing nothing.
        """
        check_id(session, "session id")

        async def forget(tx: Tx) -> bool:
            found = int(await _lock(tx, session, "deleted"))
            for table in _FORGET:
                found += await tx.run(f"DELETE FROM {table} WHERE session = %s", (session,))
            for table in _ALSO:
                await tx.run(f"DELETE FROM {table} WHERE session = %s", (session,))
            await tx.run(_RESET, (session,))
            await tx.run(_UNMADE, (session,))
            return found > 0

        return await self._atomic(session, forget)


class MySQLRepairable(Transactions):
    """The :class:`steerable.store.Repairable` verb of :class:`MySQLStore`."""

    async def replace(
        self, session: str, *, at: int, old: Sequence[str], messages: Sequence[Message]
    ) -> None:
        """Put ``messages`` at positions ``at`` and after, in place of the stored messages
        there, if those are exactly the ones whose ids are ``old`` (in order, none after).

        :class:`TranscriptConflict` otherwise, nothing written; :class:`InvalidMessage` for
        an id of a message before ``at`` or one twice among ``messages``. Not refused while
        a service turn runs.
        """
        check_id(session, "session id")
        for message in messages:
            check_id(message.id, "message id")
        bodies = [(message.id, codec.encode(message)) for message in messages]
        first, expected = min(at, MAX_AT), list(old)

        async def swap(tx: Tx) -> None:
            await _lock(tx, session, None)
            rows = await tx.rows(_TAIL, (session, first))
            stored = first + len(rows) if rows else await length_of(tx, session)
            if at > stored or [text_of(id) for id, _ in rows] != expected:
                raise TranscriptConflict(session, at + len(old), stored)
            times = {text_of(id): time for id, time in rows}
            await tx.run(_CUT, (session, first))
            if bodies:  # an id of a kept message, or twice here: a duplicate key, refused
                values = ", ".join([f"(%s, %s, %s, %s, COALESCE(%s, {NOW}))"] * len(bodies))
                args = [
                    value
                    for n, (id, body) in enumerate(bodies)
                    for value in (session, first + n, id, body, times.get(id))
                ]
                await tx.run(_PUT.format(values), args)
            await tx.run(_UNMADE, (session,))

        await self._atomic(session, swap)


async def _lock(tx: Tx, session: str, busy: str | None) -> bool:
    """Hold the session's service row, then the core's; :class:`SessionBusy` (saying the
    session cannot be ``busy``) if a turn runs, unless ``busy`` is None.

    Whether the session has metadata.
    """
    await tx.run(_MAKE, (session,))
    svc = await locked(tx, session)
    if busy is not None and svc is not None and svc.running is not None:
        raise SessionBusy(session, svc.running, busy)
    await tx.run(CORE_LOCK, (session,))
    return svc is not None and bool(svc.metadata)
