"""The MySQL/MariaDB store keeps the whole store contract, against the real server.

Twice: on a pool with aiomysql's defaults (autocommit off, the harder case for a store),
and on one with autocommit on at READ COMMITTED, as many applications set theirs. Its
hooks: a row damaged behind the store's back, a relay in front of the server that the
test cuts, and the oldest waiting steer's row held with ``SELECT ... FOR UPDATE``.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiomysql  # type: ignore[import-untyped]
import pytest

from steerable.store import Store
from steerable.testing import OpenStore, StoreContract
from tests.stores.mysql import server
from tests.stores.relay import Relay, RelayLine


class _RowLock:
    """A steer's row locked by a connection of the test; the saves behind it are counted."""

    async def until_waiting(self, count: int) -> None:
        for _ in range(400):
            rows = await server.query(
                "SELECT count(*) FROM information_schema.INNODB_TRX t"
                " JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id"
                " WHERE t.trx_state = 'LOCK WAIT' AND p.DB = %s",
                (server.DATABASE,),
            )
            if int(rows[0][0]) >= count:
                return
            await asyncio.sleep(0.15)  # the server refreshes INNODB_TRX at most every 0.1 s
        raise AssertionError(f"{count} saves never waited for the steer's row")


class _Hooks(StoreContract):
    """What the contract reaches behind a MySQL store for."""

    async def corrupt_message(self, store: Store, session: str, position: int) -> None:
        await server.query(
            "UPDATE steerable_messages SET body = '{\"v\":1' WHERE session = %s AND position = %s",
            (session, position),
        )

    async def corrupt_steer(self, store: Store, session: str, steer_id: str) -> None:
        await server.query(
            "UPDATE steerable_steers SET body = 'garbage' WHERE session = %s AND id = %s",
            (session, steer_id),
        )

    @asynccontextmanager
    async def outage(self) -> AsyncIterator[RelayLine]:
        relay = Relay(server.HOST, server.PORT)
        await relay.restore()
        try:
            async with server.open_store(
                server.DATABASE, host="127.0.0.1", port=relay.port
            ) as store:
                yield RelayLine(relay, store)
                await relay.restore()  # so the pool can close its connections cleanly
        finally:
            await relay.cut()

    @asynccontextmanager
    async def hold_steer(self, store: Store, session: str) -> AsyncIterator[_RowLock]:
        holder = await aiomysql.connect(
            host=server.HOST,
            port=server.PORT,
            user=server.USER,
            password=server.PASSWORD,
            db=server.DATABASE,
        )
        try:
            async with holder.cursor() as cur:
                await cur.execute("START TRANSACTION")
                await cur.execute(
                    "SELECT seq FROM steerable_steers WHERE session = %s AND taken_at IS NULL"
                    " ORDER BY seq LIMIT 1 FOR UPDATE",
                    (session,),
                )
                assert await cur.fetchall(), "no waiting steer to hold"
                yield _RowLock()
                await cur.execute("ROLLBACK")
        finally:
            holder.close()


ABILITIES = (
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


@pytest.mark.store_abilities(*ABILITIES)
class TestMySQLStore(_Hooks):
    @pytest.fixture
    def store_factory(self, mysql_database: str) -> OpenStore:
        return functools.partial(server.open_store, mysql_database)


@pytest.mark.store_abilities(*ABILITIES)
class TestMySQLStoreAutocommitReadCommitted(_Hooks):
    @pytest.fixture
    def store_factory(self, mysql_database: str) -> OpenStore:
        return functools.partial(
            server.open_store,
            mysql_database,
            autocommit=True,
            init_command="SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
        )
