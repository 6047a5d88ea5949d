"""The MySQL/MariaDB store: transcripts and steer boxes in three InnoDB tables.

Every verb is one statement and one round trip, whatever the pool's autocommit setting:

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
from collections.abc import Awaitable, Sequence
from typing import Any, Protocol

import aiomysql  # type: ignore[import-untyped]

from steerable import codec
from steerable.errors import (
    InvalidMessage,
    StoreError,
    StoreUnavailable,
    TranscriptConflict,
    UsageError,
)
from steerable.messages import Message
from steerable.store import Steer
from steerable.stores.migrations import refusal, require
from steerable.stores.mysql._schema import CONFLICT, MIGRATIONS, SAVE

__all__ = ["APPLY", "MySQLStore", "Pool", "error_of"]

APPLY = "await steerable.stores.mysql.migrate(pool)"
"""How the application applies the pending migrations; errors that ask for them quote it."""

_Rows = Sequence[tuple[Any, ...]]

_MAX_ID = 255  # characters of a session, message or steer id: VARBINARY(1020) in UTF-8
_MAX_AT = 2**63 - 1  # BIGINT; no transcript is longer, so a larger `at` is just a conflict
_MAX_TAKE = 2**31 - 1  # INT

# The connection is gone: client errors (2000-2999), the server shutting down, MariaDB's
# "connection killed", MySQL's idle timeout.
_GONE = frozenset({1053, 1927, 4031})
# Rolled back whole, and a second try may not meet it: a deadlock, MariaDB's snapshot
# isolation (innodb_snapshot_isolation, 11.6+) refusing a row changed since the snapshot.
_RETRY = frozenset({1020, 1213})
_ATTEMPTS = 5
_NO_TABLE = 1146
_NO_SCHEMA = frozenset({_NO_TABLE, 1305})  # no such table, no such procedure


class _Cursor(Protocol):
    async def execute(self, query: str, args: Sequence[object] = ...) -> int: ...
    def fetchall(self) -> Awaitable[_Rows]: ...
    async def nextset(self) -> bool | None: ...


class _Connection(Protocol):
    @property
    def charset(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    def cursor(self, *cursors: type) -> Awaitable[_Cursor]: ...
    def get_autocommit(self) -> bool: ...
    async def rollback(self) -> None: ...
    def close(self) -> None: ...


class Pool(Protocol):
    """What :class:`MySQLStore` uses of an ``aiomysql.Pool``."""

    def acquire(self) -> Awaitable[Any]:
        """A connection of the pool, waiting for one if all are in use."""
        ...

    def release(self, conn: Any) -> Awaitable[None]:
        """Give ``conn`` back to the pool (a closed one is dropped)."""
        ...


class MySQLStore:
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

    async def schema_version(self) -> int:
        """The highest migration the database has applied; 0 when it has none."""
        try:
            rows = await self._run("SELECT COALESCE(MAX(version), 0) FROM steerable_schema", ())
        except StoreUnavailable as exc:
            if exc.__cause__ is not None and _code(exc.__cause__) == _NO_TABLE:
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
        _check_id(session, "session id")
        await self._check_once()
        rows = await self._run(
            "SELECT position, id, body FROM steerable_messages"
            " WHERE session = %s ORDER BY position",
            (session,),
        )
        return [
            codec.decode(_text(id), body, where=f"session {session!r}, position {position}")
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
        _check_id(session, "session id")
        _check_id(steer.id, "steer id")
        await self._check_once()
        # the steer keeps the text of the message that records it, so a take copies it;
        # a no-op update on a duplicate id, because INSERT IGNORE would also turn other
        # errors (a value too long, say) into warnings
        await self._run(
            "INSERT INTO steerable_steers (session, id, body) VALUES (%s, %s, %s)"
            " ON DUPLICATE KEY UPDATE id = id",
            (session, steer.id, codec.encode(steer.message())),
        )

    async def steers(self, session: str) -> list[Steer]:
        """The steers waiting in the session's box, oldest first."""
        _check_id(session, "session id")
        await self._check_once()
        rows = await self._run(
            "SELECT id, body FROM steerable_steers"
            " WHERE session = %s AND taken_at IS NULL ORDER BY seq",
            (session,),
        )
        where = f"a steer of session {session!r}"
        return [
            Steer(codec.decode(_text(id), body, where=where).text, _text(id)) for id, body in rows
        ]

    async def _save(
        self, session: str, messages: Sequence[Message], at: int | None, take: int
    ) -> list[Message]:
        _check_id(session, "session id")
        for message in messages:
            _check_id(message.id, "message id")
        pairs = [[m.id, codec.encode(m)] for m in messages]
        await self._check_once()
        batch = json.dumps(pairs, ensure_ascii=False, separators=(",", ":"))
        args = (session, None if at is None else min(at, _MAX_AT), min(take, _MAX_TAKE), batch)
        # not retried after a broken connection: the CALL may have committed
        rows = await self._run(f"CALL {SAVE}(%s, %s, %s, %s)", args, session=session, at=at)
        where = f"a steer taken in session {session!r}"
        return [codec.decode(_text(id), body, where=where) for id, body in rows]

    # -- connections -----------------------------------------------------------------------

    async def _run(
        self, sql: str, args: Sequence[object], *, session: str = "", at: int | None = None
    ) -> _Rows:
        """The rows of one statement on a pooled connection; driver errors mapped.

        The statement runs again after a deadlock (it was rolled back whole), and once more
        on a fresh connection when the first was dead (killed, or timed out while it idled
        in the pool), unless it is the save's CALL, which may have committed.
        """
        call = sql.startswith("CALL ")
        for attempt in range(_ATTEMPTS):
            try:
                return await self._once(sql, args, call=call)
            except aiomysql.MySQLError as exc:
                last = attempt == _ATTEMPTS - 1
                if _code(exc) in _RETRY and not last:
                    continue
                if attempt == 0 and _broken(exc) and not call:
                    continue
                raise error_of(exc, session, at) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def _once(self, sql: str, args: Sequence[object], *, call: bool) -> _Rows:
        try:
            conn: _Connection = await self._pool.acquire()
        except (aiomysql.MySQLError, OSError) as exc:
            raise error_of(exc, "", None) from exc
        try:
            if conn.charset.lower() != "utf8mb4":
                raise UsageError(
                    f"the aiomysql pool's connections use charset {conn.charset!r}; steerable"
                    " needs charset='utf8mb4' (the aiomysql default) to keep any Unicode text"
                )
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
            if _broken(exc) or conn.closed:
                conn.close()
            elif not conn.get_autocommit():
                await _rollback(conn)  # a statement of the text failed; the rest did not run
            raise
        except BaseException:
            # cancelled or failed mid-answer: the connection is in a state nobody knows, so
            # it must not go back to the pool
            conn.close()
            raise
        finally:
            await self._pool.release(conn)


async def _rollback(conn: _Connection) -> None:
    try:
        await conn.rollback()
    except aiomysql.MySQLError:
        conn.close()


def _check_id(value: str, what: str) -> None:
    if len(value) > _MAX_ID:
        error = InvalidMessage if what == "message id" else UsageError
        raise error(f"a {what} holds at most {_MAX_ID} characters in MySQL, not {len(value)}")


def _text(value: str | bytes) -> str:
    """A column as str: ids are VARBINARY, and a pool may have ``use_unicode=False``."""
    return value.decode("utf-8") if isinstance(value, bytes) else value


def _code(exc: BaseException) -> int:
    args = exc.args
    return args[0] if args and isinstance(args[0], int) else 0


def _message(exc: BaseException) -> str:
    args = exc.args
    return str(args[1]) if len(args) > 1 else str(exc)


def _broken(exc: BaseException) -> bool:
    """Whether ``exc`` means the connection is gone."""
    code = _code(exc)
    return isinstance(exc, aiomysql.InterfaceError) or 2000 <= code < 3000 or code in _GONE


def error_of(exc: BaseException, session: str, at: int | None) -> StoreError | UsageError:
    """The steerable error for the driver's ``exc``, raised by a verb on ``session``."""
    code = _code(exc)
    message = _message(exc)
    if code == 1644 and message.startswith(CONFLICT):
        stored = int(message.removeprefix(CONFLICT))
        return TranscriptConflict(session, stored if at is None else at, stored)
    if code == 1062:
        return InvalidMessage(
            f"session {session!r}: a message id is already in the transcript; nothing was"
            f" saved: {message}"
        )
    if code in _NO_SCHEMA:
        missing = refusal(0, MIGRATIONS, store="MySQL", apply=APPLY)
        return StoreUnavailable(f"{message}; {missing}")
    if code == 1153:
        return StoreUnavailable(f"a save larger than the server's max_allowed_packet: {message}")
    if _broken(exc) or isinstance(exc, OSError):
        return StoreUnavailable(f"cannot reach the MySQL server: {message}")
    return StoreUnavailable(f"MySQL error {code}: {message}")
