"""Hints over LISTEN/NOTIFY: a write on one pool is heard on another's listening connection.

Absence is tested by order, never by waiting: notifications arrive in commit order, so a
write that must not hint is followed by one that must, and the next hint heard is the
second's.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from steerable.errors import Fenced, QueueFull, StoreUnavailable
from steerable.messages import new_id
from steerable.service_store import Hint, Input, Notifying, Outcome
from steerable.stores.postgres import PostgresStore
from tests.stores.postgres.support import create_pool

_HEARD = 10.0  # a bound on a hang, not a timing assertion: a hint normally comes at once


def _sid() -> str:
    return f"pg-hint-{new_id()}"


async def _next(hints: AsyncIterator[Hint]) -> Hint:
    return await asyncio.wait_for(anext(hints), _HEARD)


@pytest.fixture
async def writer(database: str) -> AsyncIterator[PostgresStore]:
    """A store over a second pool: the replica that writes while the other listens."""
    pool = await create_pool(database)
    try:
        yield PostgresStore(pool)
    finally:
        await pool.close()


async def test_the_store_notifies(store: PostgresStore) -> None:
    assert isinstance(store, Notifying)


async def test_work_and_stops_are_heard_across_pools(
    store: PostgresStore, writer: PostgresStore
) -> None:
    sid = _sid()
    async with store.hints() as hints:
        await writer.enqueue(sid, Input("send", "go", "t"))  # no turn runs: work
        assert await _next(hints) == Hint("work", sid)
        claim = await writer.claim("a", seconds=60, cap=16, session=sid)
        assert claim is not None
        await writer.enqueue(sid, Input("send", "later", "b"))  # a turn runs: no hint
        await writer.enqueue(sid, Input("steer", "offered", "s"))  # offered: no hint
        await writer.enqueue(sid, Input("send", "later", "b"))  # a duplicate: no hint
        assert await writer.stop(sid) == "t"
        assert await _next(hints) == Hint("stop", sid)
        assert await writer.stop(sid) == "t"  # asked again: heard again, recorded once
        assert await _next(hints) == Hint("stop", sid)
        assert await writer.end_turn(claim.lease, Outcome("stopped")) == "b"  # work waits
        assert await _next(hints) == Hint("work", sid)


async def test_a_refused_write_and_an_end_with_nothing_next_are_not_heard(
    store: PostgresStore, writer: PostgresStore
) -> None:
    sid, other = _sid(), _sid()
    await writer.enqueue(sid, Input("send", "go", "t"))
    claim = await writer.claim("a", seconds=60, cap=16, session=sid)
    assert claim is not None
    async with store.hints() as hints:
        assert await writer.end_turn(claim.lease, Outcome("completed")) is None
        with pytest.raises(Fenced):
            await writer.end_turn(claim.lease, Outcome("completed"))
        assert await writer.stop(sid) is None  # no turn runs: nothing to stop
        with pytest.raises(QueueFull):  # refused whole, its hint too
            await writer.enqueue(sid, Input("send", "no room"), max_waiting=0)
        await writer.enqueue(sid, Input("send", "go", "q"))
        assert await _next(hints) == Hint("work", sid)
        await writer.cancel(sid, "q")  # takes work away: nothing to hint
        await writer.enqueue(other, Input("send", "go"))
        assert await _next(hints) == Hint("work", other)


async def test_the_payload_is_json_on_the_steerable_channel(
    pool: Any, writer: PostgresStore
) -> None:
    # the wire format other tools may listen to
    heard: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
    sid = _sid()
    async with pool.acquire() as connection:

        def listen(_c: Any, _pid: int, channel: str, payload: str) -> None:
            heard.put_nowait((channel, payload))

        await connection.add_listener("steerable", listen)
        try:
            await writer.enqueue(sid, Input("send", "go"))
            channel, payload = await asyncio.wait_for(heard.get(), _HEARD)
        finally:
            await connection.remove_listener("steerable", listen)
    assert channel == "steerable"
    assert json.loads(payload) == {"kind": "work", "session": sid}


async def test_a_stranger_s_payload_on_the_channel_is_ignored(
    store: PostgresStore, writer: PostgresStore
) -> None:
    sid = _sid()
    async with store.hints() as hints:
        await writer.pool.execute("SELECT pg_notify('steerable', 'not json')")
        await writer.pool.execute("""SELECT pg_notify('steerable', '{"kind": "other"}')""")
        await writer.enqueue(sid, Input("send", "go"))
        assert await _next(hints) == Hint("work", sid)


async def test_the_listener_takes_one_connection_and_gives_it_back(database: str) -> None:
    pool = await create_pool(database, min_size=1, max_size=1)
    try:
        store = PostgresStore(pool)
        async with store.hints() as hints:
            with pytest.raises(asyncio.TimeoutError):  # the pool's one connection is lent
                await pool.acquire(timeout=0.2)
        assert [h async for h in hints] == []  # the context is left: the iterator ended
        async with pool.acquire(timeout=_HEARD) as connection:
            assert await connection.fetch("SELECT pg_listening_channels()") == []
    finally:
        await pool.close()


async def test_a_lost_listening_connection_is_said_by_the_iterator(
    store: PostgresStore, writer: PostgresStore
) -> None:
    async with store.hints() as hints:
        killed = await writer.pool.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND query = 'LISTEN \"steerable\"'"
        )
        assert killed == 1
        with pytest.raises(StoreUnavailable, match="listened for hints was lost"):
            await _next(hints)
