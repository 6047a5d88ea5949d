"""The SQLite store's renewal of many leases at once: one write transaction for them all.

``BEGIN IMMEDIATE`` takes the file's write lock first, as every service write does, so the
leases are judged (epoch, holder, a running turn: ``renew``'s fencing) and extended in one
atomic step on SQLite's clock, read once. The sessions are read in chunks of
:data:`_CHUNK` (SQLite bounds a statement's parameters) and written with one
``executemany``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any, cast

from steerable.service_store import Lease, Renewal
from steerable.stores._sqlite_rows import NOW
from steerable.stores._sqlite_service import SQLiteServiceTables

_CHUNK = 500

_HELD = (
    "SELECT s.session, s.epoch, s.holder, t.stop_requested FROM steerable_service s"
    " JOIN steerable_turns t ON t.session = s.session AND t.id = s.running"
    " WHERE s.session IN ({})"
)
"""The sessions with a running turn among a chunk: their lease's epoch and holder, and
whether the turn was asked to stop."""


def renew_many(
    db: sqlite3.Connection, leases: Sequence[Lease], seconds: float
) -> list[Renewal | None]:
    """Each lease renewed (or None where it is stale), in one write transaction."""
    db.execute("BEGIN IMMEDIATE")
    (now,) = cast(tuple[float], db.execute(NOW).fetchone())
    sessions = sorted({lease.session for lease in leases})
    held: dict[str, tuple[Any, ...]] = {}
    for at in range(0, len(sessions), _CHUNK):
        chunk = sessions[at : at + _CHUNK]
        query = _HELD.format(", ".join("?" * len(chunk)))
        for session, epoch, holder, stop in db.execute(query, chunk):
            held[session] = (epoch, holder, bool(stop))
    expires = now + seconds
    answers: list[Renewal | None] = []
    for lease in leases:
        row = held.get(lease.session)
        if row is None or row[:2] != (lease.epoch, lease.holder):
            answers.append(None)
            continue
        new = Lease(lease.session, lease.holder, lease.epoch, expires)
        answers.append(Renewal(new, row[2]))
    renewed = sorted({(expires, a.lease.session) for a in answers if a is not None})
    db.executemany("UPDATE steerable_service SET expires = ? WHERE session = ?", renewed)
    db.execute("COMMIT")
    return answers


class SQLiteLeases(SQLiteServiceTables):
    """:class:`SQLiteServiceTables` with ``renew_many``."""

    async def renew_many(self, leases: Sequence[Lease], *, seconds: float) -> list[Renewal | None]:
        """Extend each of ``leases`` by ``seconds`` from now; None for each stale one."""
        if not leases:
            return []
        return await self._call(lambda db: renew_many(db, leases, seconds))
