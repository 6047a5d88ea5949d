"""Round trips per save-and-take step, counted on the wire: one, and two when a steer waits."""

from __future__ import annotations

import asyncpg  # type: ignore[import-untyped]
import pytest

from steerable.messages import assistant, new_id, user
from steerable.store import Steer
from steerable.stores.postgres import PostgresStore
from tests.stores.postgres.support import DSN, create_pool
from tests.stores.postgres.wire import Wire, no_reset


async def _prepared(store: PostgresStore) -> str:
    """A session of two messages whose save prepared both statements (one steer taken)."""
    sid = f"pg-{new_id()}"
    await store.steer(sid, Steer("warm up", "s0"))
    assert len(await store.save(sid, [user("prompt")], at=0, take=16)) == 1
    return sid


@pytest.mark.parametrize("steered", [False, True], ids=["nobody-steered", "a-steer-waits"])
async def test_a_save_and_take_is_one_round_trip_unless_a_steer_waits(
    wire: Wire, database: str, steered: bool
) -> None:
    # the statement that appends unless a steer waits, then (only then) the one that takes
    pool = await create_pool(
        database, host="127.0.0.1", port=wire.port, min_size=1, max_size=1, reset=no_reset
    )
    try:
        store = PostgresStore(pool)
        sid = await _prepared(store)
        if steered:
            await store.steer(sid, Steer("use celsius", "s1"))
        wire.sent.clear()
        taken = await store.save(sid, [assistant("calling"), user("result")], at=2, take=16)
        trips = 2 if steered else 1
        assert (wire.round_trips, wire.sent["E"], wire.sent["P"]) == (trips, trips, 0), wire.sent
        assert [m.id for m in taken] == (["s1"] if steered else [])
        wire.sent.clear()
        await store.take_steers(sid, at=None, limit=16)
        assert (wire.round_trips, wire.sent["E"]) == (1, 1), wire.sent
    finally:
        await pool.close()


async def test_a_save_taking_nothing_is_one_round_trip(wire: Wire, database: str) -> None:
    # with `take=0` a waiting steer is not taken, and not looked for: it waits on
    pool = await create_pool(
        database, host="127.0.0.1", port=wire.port, min_size=1, max_size=1, reset=no_reset
    )
    try:
        store = PostgresStore(pool)
        sid = await _prepared(store)
        await store.steer(sid, Steer("use celsius", "s1"))
        wire.sent.clear()
        assert await store.save(sid, [assistant("calling"), user("result")], at=2) == []
        assert (wire.round_trips, wire.sent["E"], wire.sent["P"]) == (1, 1, 0), wire.sent
        async with pool.acquire() as connection:
            pid = connection.get_server_pid()
        admin = await asyncpg.connect(DSN)
        try:
            ran = await admin.fetchval("SELECT query FROM pg_stat_activity WHERE pid = $1", pid)
        finally:
            await admin.close()
        assert "INSERT INTO steerable_messages" in ran and "FOR UPDATE" not in ran, ran
        assert [s.id for s in await store.steers(sid)] == ["s1"]
        assert len(await store.messages(sid)) == 4
    finally:
        await pool.close()


async def test_a_default_pool_adds_only_its_reset_query(wire: Wire, database: str) -> None:
    # asyncpg's default pool resets a connection as it goes back (one simple query); the
    # store itself sends the same statements as over any pool.
    pool = await create_pool(database, host="127.0.0.1", port=wire.port, min_size=1, max_size=1)
    try:
        store = PostgresStore(pool)
        sid = await _prepared(store)
        wire.sent.clear()
        assert await store.save(sid, [assistant("ok")], at=2, take=16) == []
        assert (wire.sent["E"], wire.sent["S"], wire.sent["Q"]) == (1, 1, 1), wire.sent
    finally:
        await pool.close()
