"""One round trip per save-and-take step, counted on the wire, whether or not anyone steered."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest

from steerable.messages import assistant, new_id, user
from steerable.store import Steer
from steerable.stores.postgres import PostgresStore
from tests.stores.postgres.support import DSN, create_pool, server_address
from tests.stores.postgres.wire import Wire


async def _no_reset(connection: Any) -> None:
    """A pool reset that sends nothing: the store leaves no session state behind."""


@pytest.fixture
async def wire() -> AsyncIterator[Wire]:
    """A relay to the server that counts the messages clients send."""
    wire = Wire(*server_address())
    await wire.restore()
    try:
        yield wire
    finally:
        await wire.cut()


@pytest.mark.parametrize("steered", [False, True], ids=["nobody-steered", "a-steer-waits"])
async def test_a_save_and_take_is_one_round_trip(wire: Wire, database: str, steered: bool) -> None:
    pool = await create_pool(
        database, host="127.0.0.1", port=wire.port, min_size=1, max_size=1, reset=_no_reset
    )
    try:
        store = PostgresStore(pool)
        sid = f"pg-{new_id()}"
        await store.save(sid, [user("prompt")], at=0, take=16)  # prepares the statement
        if steered:
            await store.steer(sid, Steer("use celsius", "s1"))
        wire.sent.clear()
        taken = await store.save(sid, [assistant("calling"), user("result")], at=1, take=16)
        assert (wire.round_trips, wire.sent["E"], wire.sent["P"]) == (1, 1, 0), wire.sent
        assert [m.id for m in taken] == (["s1"] if steered else [])
        wire.sent.clear()
        await store.take_steers(sid, at=None, limit=16)
        assert (wire.round_trips, wire.sent["E"]) == (1, 1), wire.sent
    finally:
        await pool.close()


async def test_a_save_taking_nothing_is_one_round_trip(wire: Wire, database: str) -> None:
    # `take=0` runs a statement of its own, without the steers' part: a waiting steer waits on
    pool = await create_pool(
        database, host="127.0.0.1", port=wire.port, min_size=1, max_size=1, reset=_no_reset
    )
    try:
        store = PostgresStore(pool)
        sid = f"pg-{new_id()}"
        await store.save(sid, [user("prompt")], at=0)  # prepares the statement
        await store.steer(sid, Steer("use celsius", "s1"))
        wire.sent.clear()
        assert await store.save(sid, [assistant("calling"), user("result")], at=1) == []
        assert (wire.round_trips, wire.sent["E"], wire.sent["P"]) == (1, 1, 0), wire.sent
        async with pool.acquire() as connection:
            pid = connection.get_server_pid()
        admin = await asyncpg.connect(DSN)
        try:
            ran = await admin.fetchval("SELECT query FROM pg_stat_activity WHERE pid = $1", pid)
        finally:
            await admin.close()
        assert "INSERT INTO steerable_messages" in ran and "steerable_steers" not in ran, ran
        assert [s.id for s in await store.steers(sid)] == ["s1"]
        assert len(await store.messages(sid)) == 3
    finally:
        await pool.close()


async def test_a_default_pool_adds_only_its_reset_query(wire: Wire, database: str) -> None:
    # asyncpg's default pool resets a connection as it goes back (one simple query); the
    # store itself still sends one statement per step.
    pool = await create_pool(database, host="127.0.0.1", port=wire.port, min_size=1, max_size=1)
    try:
        store = PostgresStore(pool)
        sid = f"pg-{new_id()}"
        await store.save(sid, [user("prompt")], at=0, take=16)
        await store.steer(sid, Steer("use celsius"))
        wire.sent.clear()
        assert len(await store.save(sid, [assistant("ok")], at=1, take=16)) == 1
        assert (wire.sent["E"], wire.sent["S"], wire.sent["Q"]) == (1, 1, 1), wire.sent
    finally:
        await pool.close()
