"""The SQLite store keeps the whole store contract, with takers in separate processes too, and
the whole service store contract."""

from __future__ import annotations

import asyncio
import functools
import sqlite3
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from steerable.store import Store
from steerable.stores.sqlite import SQLiteStore
from steerable.testing import OpenStore, ServiceContract, StoreContract


def _path(store: Store) -> Path:
    assert isinstance(store, SQLiteStore)
    return store.path


class _WriteLock:
    """SQLite's write lock on the file, held by a connection of the test's own."""

    async def until_waiting(self, count: int) -> None:
        # a save waiting for the lock sits in BEGIN IMMEDIATE inside ``_append``, on its
        # store's worker thread: count those threads (a bounded poll)
        for _ in range(2000):
            frames = sys._current_frames()
            waiting = sum(
                1
                for thread in threading.enumerate()
                if thread.name.startswith("steerable-sqlite")
                and thread.ident in frames
                and frames[thread.ident].f_code.co_name == "_append"
            )
            if waiting >= count:
                return
            await asyncio.sleep(0.005)
        raise AssertionError(f"{count} saves never waited for the write lock")


class _SQLite:
    """The store factory and the hooks of the abilities, for both contracts."""

    @pytest.fixture(scope="class")
    @classmethod
    def store_factory(cls, tmp_path_factory: pytest.TempPathFactory) -> OpenStore:
        return functools.partial(SQLiteStore, tmp_path_factory.mktemp("contract") / "db")

    async def corrupt_message(self, store: Store, session: str, position: int) -> None:
        with sqlite3.connect(_path(store)) as db:
            db.execute(
                'UPDATE steerable_messages SET body = \'{"v":1,"role":\''
                " WHERE session = ? AND position = ?",
                (session, position),
            )

    @asynccontextmanager
    async def hold_steer(self, store: Store, session: str) -> AsyncIterator[_WriteLock]:
        db = sqlite3.connect(_path(store), isolation_level=None)
        try:
            db.execute("BEGIN IMMEDIATE")
            yield _WriteLock()
        finally:
            db.rollback()
            db.close()


@pytest.mark.store_abilities(
    "persistent",
    "processes",
    "corruptible",
    "lockable",
    "rewritable",
    "forkable",
    "journaled",
    "repairable",
)
class TestSQLiteStore(_SQLite, StoreContract):
    """The store contract."""


@pytest.mark.store_abilities(
    "persistent",
    "processes",
    "corruptible",
    "lockable",
    "rewritable",
    "forkable",
    "journaled",
    "repairable",
)
class TestSQLiteServiceStore(_SQLite, ServiceContract):
    """The service store contract, on the same kind of file."""
