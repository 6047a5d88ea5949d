"""The Postgres store keeps the whole store contract, against the real server.

Its hooks: a row is damaged with an UPDATE behind the store's back; the line to the
server runs through a relay the test cuts; the race for one position holds the oldest
waiting steer's row with ``SELECT ... FOR UPDATE`` on a connection of its own.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest

from steerable.store import Store
from steerable.stores.postgres import PostgresStore
from steerable.testing import OpenStore, StoreContract
from tests.stores.postgres.support import (
    DATABASE,
    DSN,
    open_store,
    server_address,
    until_lock_waits,
)
from tests.stores.relay import Relay, RelayLine


def _pool(store: Store) -> Any:
    assert isinstance(store, PostgresStore)
    return store.pool


class _RowLock:
    """A steer's row locked by ``holder``; the saves blocked behind it are counted."""

    def __init__(self, pool: Any, holder: int) -> None:
        self.pool, self.holder = pool, holder

    async def until_waiting(self, count: int) -> None:
        # the saves queue on the row lock, the first behind the holder and the next behind
        # the first: count this database's backends that wait on a lock someone holds
        await until_lock_waits(self.pool, count)


@pytest.mark.store_abilities(
    "persistent",
    "processes",
    "corruptible",
    "outage",
    "lockable",
    "rewritable",
    "forkable",
    "journaled",
    "repairable",
)
class TestPostgresStore(StoreContract):
    @pytest.fixture
    def store_factory(self, database: str) -> OpenStore:
        return functools.partial(open_store, DSN, database)

    async def corrupt_message(self, store: Store, session: str, position: int) -> None:
        await _pool(store).execute(
            'UPDATE steerable_messages SET body = \'{"v":1,"role":\''
            " WHERE session = $1 AND position = $2",
            session,
            position,
        )

    async def corrupt_steer(self, store: Store, session: str, steer_id: str) -> None:
        await _pool(store).execute(
            "UPDATE steerable_steers SET body = 'x' WHERE session = $1 AND id = $2",
            session,
            steer_id,
        )

    @asynccontextmanager
    async def outage(self) -> AsyncIterator[RelayLine]:
        relay = Relay(*server_address())
        await relay.restore()
        pool = await asyncpg.create_pool(
            DSN, host="127.0.0.1", port=relay.port, database=DATABASE, min_size=0
        )
        try:
            yield RelayLine(relay, PostgresStore(pool))
        finally:
            await relay.cut()
            pool.terminate()

    @asynccontextmanager
    async def hold_steer(self, store: Store, session: str) -> AsyncIterator[_RowLock]:
        pool = _pool(store)
        async with pool.acquire() as holder, holder.transaction():
            seq = await holder.fetchval(
                "SELECT seq FROM steerable_steers WHERE session = $1 AND NOT taken"
                " ORDER BY seq LIMIT 1 FOR UPDATE",
                session,
            )
            assert seq is not None, "no waiting steer to hold"
            yield _RowLock(pool, holder.get_server_pid())
