"""The MySQL store's side of aiomysql: connections, ids, and the driver's errors mapped.

Shared by the core verbs (:mod:`._store`) and the service's (:mod:`._service`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Any, Protocol

import aiomysql  # type: ignore[import-untyped]

from steerable.errors import (
    Fenced,
    InvalidMessage,
    StoreError,
    StoreUnavailable,
    TranscriptConflict,
    UsageError,
)
from steerable.stores.migrations import refusal
from steerable.stores.mysql._schema import CONFLICT, FENCED, MIGRATIONS

__all__ = ["APPLY", "Pool", "error_of"]

APPLY = "await steerable.stores.mysql.migrate(pool)"
"""How the application applies the pending migrations; errors that ask for them quote it."""

Rows = Sequence[tuple[Any, ...]]

_MAX_ID = 255  # characters of a session, message or steer id: VARBINARY(1020) in UTF-8
MAX_AT = 2**63 - 1  # BIGINT; no transcript is longer, so a larger `at` is just a conflict
MAX_TAKE = 2**31 - 1  # INT

# The connection is gone: client errors (2000-2999), the server shutting down, MariaDB's
# "connection killed", MySQL's idle timeout.
_GONE = frozenset({1053, 1927, 4031})
# Rolled back whole, and a second try may not meet it: a deadlock, MariaDB's snapshot
# isolation (innodb_snapshot_isolation, 11.6+) refusing a row changed since the snapshot.
RETRY = frozenset({1020, 1213})
ATTEMPTS = 5
NO_TABLE = 1146
_NO_SCHEMA = frozenset({NO_TABLE, 1305})  # no such table, no such procedure


class Cursor(Protocol):
    async def execute(self, query: str, args: Sequence[object] = ...) -> int: ...
    def fetchall(self) -> Awaitable[Rows]: ...
    async def nextset(self) -> bool | None: ...


class Connection(Protocol):
    @property
    def charset(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    def cursor(self, *cursors: type) -> Awaitable[Cursor]: ...
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


def check_charset(conn: Connection) -> None:
    """Refuse a pool whose connections would not keep every Unicode text."""
    if conn.charset.lower() != "utf8mb4":
        raise UsageError(
            f"the aiomysql pool's connections use charset {conn.charset!r}; steerable"
            " needs charset='utf8mb4' (the aiomysql default) to keep any Unicode text"
        )


async def rollback(conn: Connection) -> None:
    try:
        await conn.rollback()
    except aiomysql.MySQLError:
        conn.close()


def check_id(value: str, what: str) -> None:
    if len(value) > _MAX_ID:
        error = InvalidMessage if what == "message id" else UsageError
        raise error(f"a {what} holds at most {_MAX_ID} characters in MySQL, not {len(value)}")


def text_of(value: str | bytes) -> str:
    """A column as str: ids are VARBINARY, and a pool may have ``use_unicode=False``."""
    return value.decode("utf-8") if isinstance(value, bytes) else value


def code_of(exc: BaseException) -> int:
    args = exc.args
    return args[0] if args and isinstance(args[0], int) else 0


def _message(exc: BaseException) -> str:
    args = exc.args
    return str(args[1]) if len(args) > 1 else str(exc)


def broken(exc: BaseException) -> bool:
    """Whether ``exc`` means the connection is gone."""
    code = code_of(exc)
    return isinstance(exc, aiomysql.InterfaceError) or 2000 <= code < 3000 or code in _GONE


def error_of(exc: BaseException, session: str, at: int | None) -> StoreError | UsageError:
    """The steerable error for the driver's ``exc``, raised by a verb on ``session``."""
    code = code_of(exc)
    message = _message(exc)
    if code == 1644 and message.startswith(CONFLICT):
        stored = int(message.removeprefix(CONFLICT))
        return TranscriptConflict(session, stored if at is None else at, stored)
    if code == 1644 and message.startswith(FENCED):
        epoch, current = message.removeprefix(FENCED).split(" ")
        return Fenced(session, int(epoch), None if current == "none" else int(current))
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
    if broken(exc) or isinstance(exc, OSError):
        return StoreUnavailable(f"cannot reach the MySQL server: {message}")
    return StoreUnavailable(f"MySQL error {code}: {message}")
