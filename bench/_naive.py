"""The naive store the benchmarks put beside steerable's: one row per session, rewritten.

Every save serializes the whole transcript to one JSON text and replaces the session's row
with it, which is what a store does when it keeps a conversation as one document. Its
cost grows with the transcript; steerable's save writes only the new messages. The
serialization is steerable's own codec, so the two differ only in what they write.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

from steerable import codec
from steerable.messages import Message


def document(transcript: Sequence[Message]) -> str:
    """The whole transcript as one JSON text: ``[{"id": ..., "m": <codec text>}, ...]``."""
    return "[" + ",".join(f'{{"id":"{m.id}","m":{codec.encode(m)}}}' for m in transcript) + "]"


class NaiveStore(Protocol):
    """Saves a session by rewriting its one row."""

    async def save(self, session: str, transcript: Sequence[Message]) -> int:
        """Replace the session's row with ``transcript``; returns the bytes of the row."""
        ...

    async def close(self) -> None:
        """Release what the store holds."""
        ...


class NaiveSQLite:
    """The naive store in a SQLite file, WAL mode, on one worker thread like steerable's."""

    def __init__(self, path: Path, synchronous: str = "NORMAL") -> None:
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="naive-sqlite")
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode = WAL")
        self._db.execute(f"PRAGMA synchronous = {synchronous}")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS naive_sessions (session TEXT PRIMARY KEY, body TEXT)"
        )

    async def save(self, session: str, transcript: Sequence[Message]) -> int:
        body = document(transcript)

        def write() -> None:
            self._db.execute(
                "INSERT INTO naive_sessions (session, body) VALUES (?, ?)"
                " ON CONFLICT (session) DO UPDATE SET body = excluded.body",
                (session, body),
            )

        await asyncio.get_running_loop().run_in_executor(self._executor, write)
        return len(body.encode())

    async def close(self) -> None:
        self._db.close()
        self._executor.shutdown()


class NaivePostgres:
    """The naive store in Postgres, over an asyncpg pool."""

    def __init__(self, pool: Any) -> None:
        self._pool = pool

    async def setup(self) -> None:
        """Create the table."""
        await self._pool.execute(
            "CREATE TABLE IF NOT EXISTS naive_sessions (session text PRIMARY KEY, body text)"
        )

    async def save(self, session: str, transcript: Sequence[Message]) -> int:
        body = document(transcript)
        await self._pool.execute(
            "INSERT INTO naive_sessions (session, body) VALUES ($1, $2)"
            " ON CONFLICT (session) DO UPDATE SET body = excluded.body",
            session,
            body,
        )
        return len(body.encode())

    async def close(self) -> None:
        pass


class NaiveMySQL:
    """The naive store in MySQL/MariaDB, over an aiomysql pool (autocommit)."""

    def __init__(self, pool: Any) -> None:
        self._pool = pool

    async def setup(self) -> None:
        """Create the table."""
        async with self._pool.acquire() as conn, conn.cursor() as cursor:
            await cursor.execute(
                "CREATE TABLE IF NOT EXISTS naive_sessions (session VARCHAR(64) PRIMARY KEY,"
                " body LONGTEXT CHARACTER SET utf8mb4) ENGINE=InnoDB"
            )

    async def save(self, session: str, transcript: Sequence[Message]) -> int:
        body = document(transcript)
        async with self._pool.acquire() as conn, conn.cursor() as cursor:
            await cursor.execute(
                "INSERT INTO naive_sessions (session, body) VALUES (%s, %s)"
                " ON DUPLICATE KEY UPDATE body = VALUES(body)",
                (session, body),
            )
        return len(body.encode())

    async def close(self) -> None:
        pass


class NaiveMongo:
    """The naive store in MongoDB: one document per session, replaced."""

    def __init__(self, db: Any) -> None:
        self._sessions = db["naive_sessions"]

    async def save(self, session: str, transcript: Sequence[Message]) -> int:
        body = document(transcript)
        await self._sessions.replace_one({"_id": session}, {"body": body}, upsert=True)
        return len(body.encode())

    async def close(self) -> None:
        pass
