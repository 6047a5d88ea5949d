"""The MySQL store's service transactions: one per write, and the session's two locks.

Every service write (and the :class:`steerable.store.Rewritable` verbs) is one transaction
that first locks the session's ``steerable_service`` row (``SELECT ... FOR UPDATE``):
writers of one session queue there, fencing is checked under that lock, and a refusal
rolls back whole. A write that also changes the transcript then takes the core's lock, the
session's ``steerable_sessions`` row (as every save does), always in that order: service
row, then core row. Because the locks come before the transaction's first plain read, that
read's snapshot (REPEATABLE READ) or every read (READ COMMITTED) sees all that earlier
writers of the session committed.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import aiomysql  # type: ignore[import-untyped]

from steerable.errors import Fenced, SteerableError
from steerable.service_store import EventKind, Lease
from steerable.stores.mysql._driver import (
    ATTEMPTS,
    RETRY,
    Connection,
    Cursor,
    Pool,
    Rows,
    broken,
    check_charset,
    code_of,
    error_of,
    rollback,
)
from steerable.stores.mysql._rows import SERVICE, TURN, ServiceRow, TurnRow, service_row, turn_row
from steerable.stores.mysql._schema import NOW

__all__ = [
    "CORE_LOCK",
    "LENGTH",
    "Transactions",
    "Tx",
    "fenced",
    "length_of",
    "locked",
    "turn_of",
    "waiting_of",
]

_T = TypeVar("_T")

LENGTH = "SELECT COALESCE(MAX(position) + 1, 0) FROM steerable_messages WHERE session = %s"
"""The transcript's length, a statement of one ``session`` parameter."""

CORE_LOCK = (
    "INSERT INTO steerable_sessions (session) VALUES (%s) ON DUPLICATE KEY UPDATE session = session"
)
"""The core's lock of a session (its ``steerable_sessions`` row), as the save procedure
takes it."""


class Tx:
    """The cursor of one transaction: statements and their rows."""

    def __init__(self, cursor: Cursor) -> None:
        self._cursor = cursor

    async def rows(self, sql: str, args: Sequence[object] = ()) -> Rows:
        """The rows of one statement."""
        await self._cursor.execute(sql, args)
        return await self._cursor.fetchall()

    async def run(self, sql: str, args: Sequence[object] = ()) -> int:
        """Run one statement; the rows it changed."""
        return await self._cursor.execute(sql, args)

    async def restart(self) -> None:
        """End the transaction, which has only read so far, and begin a new one."""
        await self._cursor.execute("COMMIT")
        await self._cursor.execute("START TRANSACTION")

    async def emit(
        self, session: str, last: int, events: Sequence[tuple[EventKind, str | None, Any]]
    ) -> None:
        """Append ``events`` (kind, turn, data) with ids after ``last``, at the server's now."""
        if not events:
            return
        values = ", ".join([f"(%s, %s, %s, %s, %s, {NOW})"] * len(events))
        args: list[object] = []
        for n, (kind, turn, data) in enumerate(events, start=last + 1):
            args += [session, n, kind, turn, json.dumps(data, separators=(",", ":"))]
        await self.run(
            f"INSERT INTO steerable_events (session, id, kind, turn, data, at) VALUES {values}",
            args,
        )


async def locked(tx: Tx, session: str, *, share: bool = False) -> ServiceRow | None:
    """The session's service row, locked for update (or shared); None when it has none."""
    lock = "LOCK IN SHARE MODE" if share else "FOR UPDATE"
    rows = await tx.rows(SERVICE + lock, (session,))
    return service_row(rows[0]) if rows else None


async def turn_of(tx: Tx, session: str, id: str) -> TurnRow | None:
    """The session's turn ``id``, or None."""
    rows = await tx.rows(f"{TURN} WHERE session = %s AND id = %s", (session, id))
    return turn_row(rows[0]) if rows else None


async def fenced(tx: Tx, lease: Lease) -> tuple[ServiceRow, TurnRow]:
    """The session's row and running turn, if ``lease`` still holds it; else :class:`Fenced`."""
    svc = await locked(tx, lease.session)
    if svc is None or svc.epoch != lease.epoch or svc.holder != lease.holder:
        raise Fenced(lease.session, lease.epoch, svc.epoch if svc else None)
    turn = None if svc.running is None else await turn_of(tx, lease.session, svc.running)
    if turn is None:
        raise Fenced(lease.session, lease.epoch, svc.epoch)
    return svc, turn


async def length_of(tx: Tx, session: str) -> int:
    """How many messages the session's transcript holds, read in the transaction."""
    rows = await tx.rows(LENGTH, (session,))
    return int(rows[0][0])


async def waiting_of(tx: Tx, session: str, bound: int | None = None) -> int:
    """How many inputs wait (offered or not), counted no further than ``bound`` if given.

    A range of the inputs' (session, state, seq) key, read from the key alone.
    """
    sql = (
        "SELECT 1 FROM steerable_inputs FORCE INDEX (steerable_inputs_state)"
        " WHERE session = %s AND state = 'waiting'"
    )
    if bound is None:
        rows = await tx.rows(f"SELECT COUNT(*) FROM ({sql}) AS w", (session,))
    else:
        rows = await tx.rows(f"SELECT COUNT(*) FROM ({sql} LIMIT %s) AS w", (session, bound))
    return int(rows[0][0])


class Transactions:
    """What the store's service and rewrite verbs share: a transaction on a pooled connection.

    The base of :class:`MySQLStore`'s mixins; the store gives ``_pool``, ``_check_once`` and
    ``_run``.
    """

    _pool: Pool

    async def _check_once(self) -> None:
        raise NotImplementedError

    async def _run(
        self, sql: str, args: Sequence[object], *, session: str = "", at: int | None = None
    ) -> Rows:
        raise NotImplementedError

    async def _atomic(
        self, session: str, work: Callable[[Tx], Awaitable[_T]], *, at: int | None = None
    ) -> _T:
        """``work`` in one transaction, again after a deadlock (it was rolled back whole).

        Not again after a broken connection: the COMMIT may have been done.
        """
        await self._check_once()
        for attempt in range(ATTEMPTS):
            try:
                return await self._transaction(work)
            except aiomysql.MySQLError as exc:
                if code_of(exc) in RETRY and attempt < ATTEMPTS - 1:
                    continue
                raise error_of(exc, session, at) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def _transaction(self, work: Callable[[Tx], Awaitable[_T]]) -> _T:
        try:
            conn: Connection = await self._pool.acquire()
        except (aiomysql.MySQLError, OSError) as exc:
            raise error_of(exc, "", None) from exc
        try:
            check_charset(conn)
            cursor = await conn.cursor(aiomysql.Cursor)
            # ends whatever transaction the connection held (it could only have read)
            await cursor.execute("START TRANSACTION")
            result = await work(Tx(cursor))
            await cursor.execute("COMMIT")
            return result
        except aiomysql.MySQLError as exc:
            if broken(exc) or conn.closed:
                conn.close()
            else:
                await rollback(conn)
            raise
        except SteerableError:
            await rollback(conn)  # refused by the checks: nothing of it is kept
            raise
        except BaseException:
            conn.close()  # cancelled mid-answer: a state nobody knows, never back to the pool
            raise
        finally:
            await self._pool.release(conn)
