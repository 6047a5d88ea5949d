"""The MySQL/MariaDB store: transcripts and steer boxes in three InnoDB tables.

The service's writes are :mod:`._service`'s and its reads :mod:`._views`', the cut, the
delete and the tail swap :mod:`._rewrite`'s, the fork :mod:`._fork`'s and the tool journal
:mod:`._journal`'s, mixed in. Every verb here is one
statement and one round trip, whatever the pool's autocommit setting:

- A save (and a take) is one ``CALL`` of the stored procedure of :mod:`._schema`. The
  procedure starts and commits its own transaction and runs nothing after the commit, so
  it leaves no transaction open, and ``START TRANSACTION`` ends any the connection held.
- The other verbs are one plain statement. On a connection with autocommit off it is sent
  as ``ROLLBACK; <statement>; COMMIT`` in one text (aiomysql connects every connection
  with multi-statement support): a statement alone would run in whatever transaction the
  connection holds and leave its own open. The server does not flag a transaction that
  only read as one, so aiomysql's pool keeps such a connection, snapshot and all, and the
  next read on it (ours or the application's) would see the past.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import aiomysql  # type: ignore[import-untyped]

from steerable import codec
from steerable.errors import StoreUnavailable, UsageError
from steerable.messages import Message
from steerable.store import Steer
from steerable.stores.migrations import require
from steerable.stores.mysql._driver import (
    APPLY,
    ATTEMPTS,
    MAX_AT,
    MAX_TAKE,
    NO_TABLE,
    RETRY,
    Connection,
    Pool,
    Rows,
    broken,
    check_charset,
    check_id,
    code_of,
    error_of,
    rollback,
    text_of,
)
from steerable.stores.mysql._fork import MySQLForkable
from steerable.stores.mysql._journal import MySQLJournaling
from steerable.stores.mysql._leases import MySQLLeases
from steerable.stores.mysql._rewrite import MySQLRepairable, MySQLRewritable
from steerable.stores.mysql._schema import MIGRATIONS, SAVE
from steerable.stores.mysql._views import MySQLServiceViews

__all__ = ["APPLY", "MySQLStore", "Pool", "error_of"]


class MySQLStore(
    MySQLLeases,
    MySQLServiceViews,
    MySQLRewritable,
    MySQLRepairable,
    MySQLForkable,
    MySQLJournaling,
):
    """A :class:`steerable.Store` in MySQL 8 or MariaDB 10.6+, over an ``aiomysql`` pool.

    The pool is the application's: where the server is, how many connections and how
    long to wait are its settings. Its connections must use ``charset="utf8mb4"`` (the
    aiomysql default); autocommit on or off both work. The database must hold
    :data:`steerable.stores.mysql.MIGRATIONS`, applied by the application with
    :func:`steerable.stores.mysql.migrate`; :meth:`check_schema` says whether it does.

    Ids (of sessions, messages, steers) hold at most 255 characters and compare byte for
    byte: limits of the columns, checked here. Otherwise the store trusts its arguments to
    be typed as annotated (the front door, :class:`steerable.Session`, validates them).
    A save that was cancelled, or failed with :class:`StoreUnavailable` because the
    connection broke, may or may not have been stored (the server may have committed
    before the answer was lost); it is never half stored. Load the transcript to see: the
    message ids tell, and a steer it took is in it, so no steer is lost either way.
    """

    def __init__(self, pool: Pool) -> None:
        if not callable(getattr(pool, "acquire", None)):
            raise UsageError(f"MySQLStore takes an aiomysql pool, not {type(pool).__name__}")
        self._pool = pool
        self._checked = False  # this object has seen the database at SCHEMA_VERSION

    @property
    def pool(self) -> Pool:
        """The ``aiomysql`` pool this store was given (for ``migrate``, say)."""
        return self._pool

    async def schema_version(self) -> int:
        """The highest migration the database has applied; 0 when it has none."""
        try:
            rows = await self._run("SELECT COALESCE(MAX(version), 0) FROM steerable_schema", ())
        except StoreUnavailable as exc:
            if exc.__cause__ is not None and code_of(exc.__cause__) == NO_TABLE:
                return 0
            raise
        return int(rows[0][0])

    async def check_schema(self) -> None:
        """Raise :class:`StoreUnavailable` unless the database has this steerable's schema.

        Older, it names the migration step to apply; newer, it asks for a newer steerable.
        """
        require(await self.schema_version(), MIGRATIONS, store="MySQL", apply=APPLY)
        self._checked = True

    async def _check_once(self) -> None:
        # before this object's first verb, reads too: see the package docstring
        if not self._checked:
            await self.check_schema()

    async def messages(self, session: str) -> list[Message]:
        """The session's transcript, in position order (empty for a new session)."""
        check_id(session, "session id")
        await self._check_once()
        rows = await self._run(
            "SELECT position, id, body FROM steerable_messages"
            " WHERE session = %s ORDER BY position",
            (session,),
        )
        return [
            codec.decode(text_of(id), body, where=f"session {session!r}, position {position}")
            for position, id, body in rows
        ]

    async def save(
        self, session: str, messages: Sequence[Message], *, at: int, take: int = 0
    ) -> list[Message]:
        """Append ``messages`` at position ``at``, then take up to ``take`` steers; atomic."""
        return await self._save(session, messages, at, take)

    async def take_steers(self, session: str, *, at: int | None, limit: int) -> list[Message]:
        """Take up to ``limit`` steers and record them at ``at`` (or at the end); atomic."""
        return await self._save(session, (), at, limit)

    async def steer(self, session: str, steer: Steer) -> None:
        """Leave ``steer`` in the session's box; a steer id seen before is ignored."""
        check_id(session, "session id")
        check_id(steer.id, "steer id")
        await self._check_once()
        # the steer keeps the text of the message that records it, so a take copies it;
        # a no-op update on a duplicate id, because INSERT IGNORE would also turn other
        # errors (a value too long, say) into warnings. The table's trigger (schema step 8)
        # first sets the session's steers mark, under its lock, so the next save looks.
        await self._run(
            "INSERT INTO steerable_steers (session, id, body) VALUES (%s, %s, %s)"
            " ON DUPLICATE KEY UPDATE id = id",
            (session, steer.id, codec.encode(steer.message())),
        )

    async def steers(self, session: str) -> list[Steer]:
        """The steers waiting in the session's box, oldest first."""
        check_id(session, "session id")
        await self._check_once()
        rows = await self._run(
            "SELECT id, body FROM steerable_steers"
            " WHERE session = %s AND taken_at IS NULL ORDER BY seq",
            (session,),
        )
        where = f"a steer of session {session!r}"
        return [
            Steer(codec.decode(text_of(id), body, where=where).text, text_of(id))
            for id, body in rows
        ]

    async def _save(
        self, session: str, messages: Sequence[Message], at: int | None, take: int
    ) -> list[Message]:
        check_id(session, "session id")
        for message in messages:
            check_id(message.id, "message id")
        pairs = [[m.id, codec.encode(m)] for m in messages]
        await self._check_once()
        batch = json.dumps(pairs, ensure_ascii=False, separators=(",", ":"))
        args = (session, None if at is None else min(at, MAX_AT), min(take, MAX_TAKE), batch)
        # not retried after a broken connection: the CALL may have committed
        rows = await self._run(f"CALL {SAVE}(%s, %s, %s, %s)", args, session=session, at=at)
        where = f"a steer taken in session {session!r}"
        return [codec.decode(text_of(id), body, where=where) for id, body in rows]

    # -- connections -----------------------------------------------------------------------

    async def _run(
        self, sql: str, args: Sequence[object], *, session: str = "", at: int | None = None
    ) -> Rows:
        """The rows of one statement on a pooled connection; driver errors mapped.

        The statement runs again after a deadlock (it was rolled back whole), and once more
        on a fresh connection when the first was dead (killed, or timed out while it idled
        in the pool), unless it is the save's CALL, which may have committed.
        """
        call = sql.startswith("CALL ")
        for attempt in range(ATTEMPTS):
            try:
                return await self._once(sql, args, call=call)
            except aiomysql.MySQLError as exc:
                last = attempt == ATTEMPTS - 1
                if code_of(exc) in RETRY and not last:
                    continue
                if attempt == 0 and broken(exc) and not call:
                    continue
                raise error_of(exc, session, at) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def _once(self, sql: str, args: Sequence[object], *, call: bool) -> Rows:
        try:
            conn: Connection = await self._pool.acquire()
        except (aiomysql.MySQLError, OSError) as exc:
            raise error_of(exc, "", None) from exc
        try:
            check_charset(conn)
            cur = await conn.cursor(aiomysql.Cursor)
            wrapped = not call and not conn.get_autocommit()
            await cur.execute(f"ROLLBACK; {sql}; COMMIT" if wrapped else sql, args)
            if wrapped:
                await cur.nextset()
            rows = await cur.fetchall()
            while await cur.nextset():  # read every answer: an error may come last (COMMIT)
                pass
            return rows
        except aiomysql.MySQLError as exc:
            if broken(exc) or conn.closed:
                conn.close()
            elif not conn.get_autocommit():
                await rollback(conn)  # a statement of the text failed; the rest did not run
            raise
        except BaseException:
            # cancelled or failed mid-answer: the connection is in a state nobody knows, so
            # it must not go back to the pool
            conn.close()
            raise
        finally:
            await self._pool.release(conn)
