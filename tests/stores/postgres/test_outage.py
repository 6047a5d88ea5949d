"""The database going away: StoreUnavailable with a clear message, and nothing lost."""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest

from steerable.errors import StoreUnavailable
from steerable.messages import new_id, user
from steerable.store import Steer
from steerable.stores.postgres import PostgresStore
from tests.stores.postgres.support import DSN, create_pool


def _verbs(store: PostgresStore, sid: str) -> list[Callable[[], Awaitable[object]]]:
    return [
        lambda: store.messages(sid),
        lambda: store.save(sid, [user("x")], at=0, take=1),
        lambda: store.steer(sid, Steer("x")),
        lambda: store.steers(sid),
        lambda: store.take_steers(sid, at=None, limit=1),
        lambda: store.truncate(sid, at=0, length=1),
        lambda: store.delete(sid),
        store.check_schema,
    ]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


async def test_no_server_listening_is_store_unavailable() -> None:
    pool = await asyncpg.create_pool(DSN, host="127.0.0.1", port=_free_port(), min_size=0)
    try:
        for verb in _verbs(PostgresStore(pool), f"pg-{new_id()}"):
            with pytest.raises(StoreUnavailable, match="Postgres cannot be reached"):
                await verb()
    finally:
        await pool.close()


async def test_a_closed_pool_is_store_unavailable(database: str) -> None:
    pool = await create_pool(database)
    store = PostgresStore(pool)
    await store.check_schema()  # so each verb reaches the pool itself
    await pool.close()
    for verb in _verbs(store, f"pg-{new_id()}"):
        with pytest.raises(StoreUnavailable, match="pool is closed"):
            await verb()


async def test_terminated_connections_fail_cleanly_and_the_pool_recovers(
    pool: Any, database: str
) -> None:
    sid = f"pg-{new_id()}"
    store = PostgresStore(pool)
    await store.save(sid, [user("kept")], at=0)
    victim = await create_pool(
        database, min_size=2, max_size=2, server_settings={"application_name": "victim"}
    )
    try:
        victims = PostgresStore(victim)
        assert len(await victims.messages(sid)) == 1
        killed = await pool.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = $1 AND pid <> pg_backend_pid() AND application_name = 'victim'",
            database,
        )
        assert killed == 2
        outcomes: list[str] = []
        for _ in range(3):  # each dead connection fails one call at most; new ones serve
            try:
                outcomes.append(str(len(await victims.messages(sid))))
            except StoreUnavailable as exc:
                outcomes.append(str(exc).split(":")[0])
        assert outcomes[-1] == "1", outcomes
        assert set(outcomes) <= {f"cannot read session {sid!r}", "1"}, outcomes
    finally:
        await victim.close()
