"""Applying the MySQL store's migrations: in order, each once, with replicas racing."""

from __future__ import annotations

from typing import Any

import aiomysql  # type: ignore[import-untyped]

from steerable.errors import StoreUnavailable
from steerable.stores.migrations import pending, refusal
from steerable.stores.mysql._schema import MIGRATIONS
from steerable.stores.mysql._store import APPLY, error_of

# A named lock is server wide: the name carries a digest of the database's name (a lock
# name holds at most 64 characters), so migrations of two databases never wait on each
# other. It is the connection's, so a migrator that dies lets go with it.
_LOCK = "SELECT GET_LOCK(CONCAT('steerable:', MD5(DATABASE())), %s)"
_UNLOCK = "SELECT RELEASE_LOCK(CONCAT('steerable:', MD5(DATABASE())))"

_BOOKS = """CREATE TABLE IF NOT EXISTS steerable_schema (
    version    INT NOT NULL,
    applied_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (version)
) ENGINE=InnoDB"""

_VERSION = "SELECT COALESCE(MAX(version), 0) FROM steerable_schema"

_RECORD = "INSERT INTO steerable_schema (version) VALUES (%s)"


async def migrate(pool: Any, *, wait: float = 60.0) -> list[int]:
    """Apply the steps of :data:`MIGRATIONS` that the database lacks; the versions applied.

    ``pool`` is an ``aiomysql`` pool; the tables go into its connections' database. Every
    migrator holds one named lock (``GET_LOCK``) while it works, waiting up to ``wait``
    seconds for it: replicas that all migrate at start-up queue, and each later one finds
    the steps done. Each step's version is recorded once its statements have all run; a
    migrator cut off inside a step leaves it unrecorded, and the next one runs the step
    again (its statements are idempotent). Safe to run again (it does nothing); a database
    newer than this steerable is left untouched (:class:`StoreUnavailable`).
    """
    try:
        connection = await pool.acquire()
    except (aiomysql.MySQLError, OSError) as exc:
        raise error_of(exc, "", None) from exc
    try:
        cursor = await connection.cursor()
        try:
            await cursor.execute(_LOCK, (wait,))
            (locked,) = await cursor.fetchone()
            if locked != 1:
                raise StoreUnavailable(
                    f"another steerable migration held the MySQL database for {wait} s: try"
                    " again once it is done"
                )
            # "already exists" is a note, and aiomysql turns every note into a Python warning
            await cursor.execute("SET SESSION sql_notes = 0")
            try:
                return await _apply(connection, cursor)
            finally:
                await cursor.execute("SET SESSION sql_notes = DEFAULT")
                await cursor.execute(_UNLOCK)
        except aiomysql.MySQLError as exc:
            raise error_of(exc, "", None) from exc
    except BaseException:
        connection.close()  # in a state nobody knows: never back to the pool
        raise
    finally:
        await pool.release(connection)


async def _apply(connection: Any, cursor: Any) -> list[int]:
    await connection.rollback()  # end any transaction: the version is read after the lock
    await cursor.execute(_BOOKS)
    await cursor.execute(_VERSION)
    (version,) = await cursor.fetchone()
    await connection.commit()
    error = refusal(version, MIGRATIONS, store="MySQL", apply=APPLY)
    if error is not None and version > len(MIGRATIONS):
        raise error  # newer than this steerable: leave it as it is
    applied: list[int] = []
    for step in pending(MIGRATIONS, version):
        for statement in step.steps:
            await cursor.execute(statement)
        await cursor.execute(_RECORD, (step.version,))
        await connection.commit()
        applied.append(step.version)
    return applied
