"""``reset_when_needed``: no reset query for a clean connection, the full reset for a marked one.

What goes to the server is counted on the wire (:class:`Wire`: the default reset is one
simple ``Query``; the store's statements use the extended protocol), and what a connection
carries into its next use is read from the server itself (its settings, its
``pg_listening_channels()``, ``pg_locks``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import asyncpg  # type: ignore[import-untyped]

from steerable.errors import StoreUnavailable
from steerable.messages import new_id, user
from steerable.stores.postgres import PostgresStore, mark_for_reset, migrate, reset_when_needed
from steerable.stores.postgres._live import PostgresLive
from steerable.stores.postgres._migrate import _KEY
from steerable.stores.url import open_url
from tests.stores.postgres.support import DSN, create_pool, fresh_database
from tests.stores.postgres.wire import Wire

_SETTING = "SELECT current_setting('work_mem')"


@contextlib.asynccontextmanager
async def _one_connection(database: str, wire: Wire, **options: Any) -> AsyncIterator[Any]:
    """A pool of one connection through ``wire``, resetting with :func:`reset_when_needed`."""
    pool = await create_pool(
        database,
        host="127.0.0.1",
        port=wire.port,
        min_size=1,
        max_size=1,
        reset=reset_when_needed,
        **options,
    )
    try:
        yield pool
    finally:
        await pool.close()


async def _default_work_mem(pool: Any) -> str:
    async with pool.acquire() as connection:
        value: str = await connection.fetchval(_SETTING)
    return value


async def test_a_store_call_sends_no_reset_query(wire: Wire, database: str) -> None:
    async with _one_connection(database, wire) as pool:
        store = PostgresStore(pool)
        sid = f"pg-{new_id()}"
        await store.save(sid, [user("prompt")], at=0, take=16)  # prepares the statement
        wire.sent.clear()
        await store.save(sid, [user("more")], at=1, take=16)
        assert (wire.round_trips, wire.sent["Q"]) == (1, 0), wire.sent


async def test_the_url_pool_sends_no_reset_query(wire: Wire, database: str) -> None:
    # `steerable serve --store postgresql://...` opens its store this way
    user_name = DSN.split("://", 1)[1].split("@", 1)[0]
    async with open_url(f"postgresql://{user_name}@127.0.0.1:{wire.port}/{database}") as store:
        sid = f"pg-{new_id()}"
        await store.save(sid, [user("prompt")], at=0, take=16)
        wire.sent.clear()
        await store.save(sid, [user("more")], at=1, take=16)
        assert (wire.round_trips, wire.sent["Q"]) == (1, 0), wire.sent


async def test_a_marked_connection_is_reset_fully(wire: Wire, database: str) -> None:
    async with _one_connection(database, wire) as pool:
        default = await _default_work_mem(pool)
        async with pool.acquire() as connection:
            mark_for_reset(connection)
            await connection.execute("SET work_mem = '1234kB'")
            await connection.execute("LISTEN somewhere")
            wire.sent.clear()
        assert wire.sent["Q"] == 1, wire.sent  # the default reset's query
        async with pool.acquire() as connection:
            assert await connection.fetchval(_SETTING) == default != "1234kB"
            assert await connection.fetch("SELECT pg_listening_channels()") == []
        wire.sent.clear()
        async with pool.acquire() as connection:  # the mark was used up
            await connection.fetchval("SELECT 1")
        assert wire.sent["Q"] == 0, wire.sent


async def test_an_unmarked_setting_outlives_the_release(wire: Wire, database: str) -> None:
    # the cost the module's docstring states: what nobody marks is not reset
    async with _one_connection(database, wire) as pool:
        async with pool.acquire() as connection:
            await connection.execute("SET work_mem = '1234kB'")
        async with pool.acquire() as connection:
            assert await connection.fetchval(_SETTING) == "1234kB"


async def test_a_connection_given_back_mid_transaction_loses_its_work(
    wire: Wire, database: str
) -> None:
    # asyncpg rolls the transaction back before it calls the pool's reset
    async with _one_connection(database, wire) as pool:
        default = await _default_work_mem(pool)
        async with pool.acquire() as connection:
            transaction = connection.transaction()
            await transaction.start()
            await connection.execute("SET work_mem = '1234kB'")
            await connection.execute("LISTEN somewhere")
        async with pool.acquire() as connection:
            assert not connection.is_in_transaction()
            assert await connection.fetchval(_SETTING) == default
            assert await connection.fetch("SELECT pg_listening_channels()") == []


async def test_hints_leave_no_listen_behind(wire: Wire, database: str) -> None:
    async with _one_connection(database, wire) as pool:
        store = PostgresStore(pool)
        async with store.hints():
            wire.sent.clear()
        assert wire.sent["Q"] == 0, wire.sent  # it undid its LISTEN itself: no full reset
        async with pool.acquire() as connection:
            assert await connection.fetch("SELECT pg_listening_channels()") == []


async def test_live_events_leave_no_listen_behind(wire: Wire, database: str) -> None:
    async with _one_connection(database, wire) as pool:
        live = PostgresLive(pool)
        async with live.running():
            await asyncio.wait_for(live.listening.wait(), 10)
            wire.sent.clear()
        assert wire.sent["Q"] == 0, wire.sent
        async with pool.acquire() as connection:
            assert await connection.fetch("SELECT pg_listening_channels()") == []


async def test_migrate_leaves_no_lock_and_no_reset(wire: Wire) -> None:
    async with (
        fresh_database("steerable_reset_", migrated=False) as name,
        _one_connection(name, wire) as pool,
    ):
        await migrate(pool)
        async with _admin() as admin:
            assert await _advisory_locks(admin, name) == 0
        # the server's last statement on the connection: the unlock, not a reset after it
        assert await _last_query(pool) == f"SELECT pg_advisory_unlock({_KEY})"


async def test_migrate_interrupted_holding_its_lock_gives_back_a_reset_connection(
    wire: Wire,
) -> None:
    # A migration blocked in a step is cancelled, and cancelled again as it unwinds: it
    # never lets go of its run lock itself. The connection goes back marked, and the full
    # reset lets go of the lock; unmarked, the pool's idle connection would keep holding it.
    async with fresh_database("steerable_reset_", migrated=False) as name:
        blocker = await asyncpg.connect(DSN, database=name)
        try:
            await blocker.execute(
                "CREATE TABLE steerable_schema (version integer PRIMARY KEY,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            async with _one_connection(name, wire) as pool, _admin() as admin:
                transaction = blocker.transaction()
                await transaction.start()
                await blocker.execute("LOCK TABLE steerable_schema IN ACCESS EXCLUSIVE MODE")
                task = asyncio.create_task(migrate(pool))
                for _ in range(500):
                    if await _advisory_locks(admin, name):
                        break
                    await asyncio.sleep(0.01)
                assert await _advisory_locks(admin, name) == 1  # it holds the run lock, and waits
                task.cancel()
                await asyncio.sleep(0)
                task.cancel()  # while it unwinds, before its unlock
                # its unlock then fails in the aborted transaction (StoreUnavailable), or is
                # itself cancelled: either way the lock is still held here
                with contextlib.suppress(asyncio.CancelledError, StoreUnavailable):
                    await task
                await transaction.rollback()
                async with pool.acquire() as connection:
                    await connection.fetchval("SELECT 1")
                assert await _advisory_locks(admin, name) == 0
        finally:
            await blocker.close()


@contextlib.asynccontextmanager
async def _admin() -> AsyncIterator[Any]:
    connection = await asyncpg.connect(DSN)
    try:
        yield connection
    finally:
        await connection.close()


async def _advisory_locks(admin: Any, database: str) -> int:
    """Advisory locks held in ``database`` (the server is shared: other runs migrate too)."""
    count: int = await admin.fetchval(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
        " AND database = (SELECT oid FROM pg_database WHERE datname = $1)",
        database,
    )
    return count


async def _last_query(pool: Any) -> str:
    async with pool.acquire() as connection:
        pid = connection.get_server_pid()
    async with _admin() as admin:
        query: str = await admin.fetchval("SELECT query FROM pg_stat_activity WHERE pid = $1", pid)
    return query
