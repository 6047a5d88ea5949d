"""The MySQL store when connections die: all or nothing, nothing lost, clear errors.

Nothing here stops the shared server: a connection is killed with ``KILL`` from another
one, and "the server is down" is a pool pointed at a port nobody listens on.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import aiomysql  # type: ignore[import-untyped]
import pytest

from steerable.errors import StoreUnavailable
from steerable.messages import new_id, user
from steerable.store import Steer
from steerable.stores.mysql import MySQLStore
from tests.stores.mysql import server


async def _thread_id(pool: Any) -> int:
    """The server's id of the (only) connection of ``pool``."""
    async with pool.acquire() as conn:
        thread_id: int = conn.thread_id()
        return thread_id


async def _lock_waiter(query_like: str) -> tuple[int, int]:
    """The connection whose statement (``LIKE query_like``) waits for a row lock, and how
    many rows its transaction has written so far.

    The server shows a statement of a stored procedure with its arguments, the session id
    among them, so a test finds its own waiter whatever other tests left behind.
    """
    for _ in range(200):
        waiting = await server.query(
            "SELECT trx_mysql_thread_id, trx_rows_modified FROM information_schema.INNODB_TRX"
            " WHERE trx_state = 'LOCK WAIT' AND trx_query LIKE %s",
            (query_like,),
        )
        if waiting:
            return int(waiting[0][0]), int(waiting[0][1])
        # the server refreshes this table only once nobody has read it for 0.1 s
        await asyncio.sleep(0.15)
    raise AssertionError(f"no statement like {query_like!r} waited for a lock")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def test_a_server_nobody_listens_on_is_store_unavailable() -> None:
    async with server.open_store(server.DATABASE, host="127.0.0.1", port=_free_port()) as store:
        for call in (
            lambda: store.messages("s"),
            lambda: store.save("s", [user("a")], at=0, take=1),
            lambda: store.take_steers("s", at=None, limit=1),
            lambda: store.steer("s", Steer("x")),
            lambda: store.steers("s"),
        ):
            with pytest.raises(StoreUnavailable, match="cannot reach the MySQL server"):
                await call()


@pytest.mark.parametrize("verb", ["save-and-take", "take"])
async def test_a_connection_killed_mid_save_stores_all_or_nothing(verb: str) -> None:
    sid = f"mysql-{new_id()}"
    # Ids placed so that a lock on the gap after "m-sep" in the (session, id) index stops the
    # save exactly when it records the steer "z-steer": its 100 messages ("b-...") and the
    # mark on the steer are written by then, uncommitted.
    base = [user("base", id="a-base"), user("separator", id="m-sep")]
    batch = [user("x" * 10_000, id=f"b-{i:03d}") for i in range(100)] if verb != "take" else []
    async with server.pool_on(maxsize=1) as pool:
        store = MySQLStore(pool)
        await store.save(sid, base, at=0)
        await store.steer(sid, Steer("steer", "z-steer"))
        victim = await _thread_id(pool)
        blocker = await aiomysql.connect(
            host=server.HOST, port=server.PORT, user=server.USER, password=server.PASSWORD,
            db=server.DATABASE, autocommit=False,
        )  # fmt: skip
        try:
            async with blocker.cursor() as cur:
                await cur.execute(
                    "SELECT id FROM steerable_messages WHERE session = %s AND id = %s FOR UPDATE",
                    (sid, "z-steer"),
                )
            saving = asyncio.create_task(store.save(sid, batch, at=2, take=16))
            waiter, written = await _lock_waiter(f"INSERT INTO steerable_messages%steers%{sid}%")
            assert waiter == victim
            assert written > len(batch)  # the messages and the mark on the steer, uncommitted
            await server.query(f"KILL CONNECTION {victim}")
            with pytest.raises(StoreUnavailable, match="cannot reach the MySQL server"):
                await saving
        finally:
            await blocker.rollback()
            blocker.close()
        # none of it is stored and the steer still waits; the retried save does it all once
        assert [m.id for m in await store.messages(sid)] == ["a-base", "m-sep"]
        assert [s.id for s in await store.steers(sid)] == ["z-steer"]
        assert [m.id for m in await store.save(sid, batch, at=2, take=16)] == ["z-steer"]
        stored = [m.id for m in await store.messages(sid)]
        assert await store.take_steers(sid, at=None, limit=16) == []
    assert stored == ["a-base", "m-sep", *(m.id for m in batch), "z-steer"]


async def test_after_a_connection_is_killed_the_store_works_and_lost_nothing() -> None:
    sid = f"mysql-{new_id()}"
    async with server.pool_on(maxsize=1) as pool:
        store = MySQLStore(pool)
        await store.save(sid, [user("a"), user("b")], at=0)
        await store.steer(sid, Steer("waiting", "w"))
        await server.query(f"KILL CONNECTION {await _thread_id(pool)}")
        # the pool's only connection is dead; the next calls use a fresh one
        assert [m.text for m in await store.messages(sid)] == ["a", "b"]
        await server.query(f"KILL CONNECTION {await _thread_id(pool)}")
        assert [s.id for s in await store.steers(sid)] == ["w"]
        await server.query(f"KILL CONNECTION {await _thread_id(pool)}")
        await store.steer(sid, Steer("another", "x"))
        taken = await store.save(sid, [user("c")], at=2, take=16)
        back = [m.text for m in await store.messages(sid)]
    assert [m.id for m in taken] == ["w", "x"]
    assert back == ["a", "b", "c", "waiting", "another"]


async def test_a_killed_connection_is_not_handed_out_again(store: MySQLStore) -> None:
    # killed while a save waits for a lock: the save fails, and its connection, gone, must
    # not go back to the pool for the next call to fail on
    sid = f"mysql-{new_id()}"
    await store.save(sid, [user("a")], at=0)
    holder = await aiomysql.connect(
        host=server.HOST, port=server.PORT, user=server.USER, password=server.PASSWORD,
        db=server.DATABASE, autocommit=False,
    )  # fmt: skip
    try:
        async with holder.cursor() as cur:  # holds the session's lock
            await cur.execute(
                "SELECT session FROM steerable_sessions WHERE session = %s FOR UPDATE", (sid,)
            )
        saving = asyncio.create_task(store.save(sid, [user("b")], at=1))
        victim, _ = await _lock_waiter(f"%steerable_sessions%{sid}%FOR UPDATE")
        await server.query(f"KILL CONNECTION {victim}")
        with pytest.raises(StoreUnavailable):
            await saving
    finally:
        await holder.rollback()
        holder.close()
    assert [m.text for m in await store.messages(sid)] == ["a"]
    await store.save(sid, [user("b")], at=1)
    assert [m.text for m in await store.messages(sid)] == ["a", "b"]


class _DeadFirst:
    """A pool that hands out ``dead`` (a connection the server killed) before any other,
    as a pool does when a connection died without the client hearing of it yet."""

    def __init__(self, pool: Any, dead: Any) -> None:
        self.pool, self.dead = pool, dead

    async def acquire(self) -> Any:
        if self.dead is not None:
            conn, self.dead = self.dead, None
            return conn
        return await self.pool.acquire()

    def release(self, conn: Any) -> Any:
        return self.pool.release(conn)


async def _killed(pool: Any) -> Any:
    conn = await pool.acquire()
    await server.query(f"KILL CONNECTION {conn.thread_id()}")
    return conn


async def _on_a_dead_connection(pool: Any) -> MySQLStore:
    """A store past its schema check (its first call) whose next connection is dead."""
    first = _DeadFirst(pool, None)
    store = MySQLStore(first)
    await store.check_schema()
    first.dead = await _killed(pool)
    return store


async def test_a_dead_connection_from_the_pool_costs_a_read_nothing(pool: Any) -> None:
    sid = f"mysql-{new_id()}"
    await MySQLStore(pool).save(sid, [user("a")], at=0)
    await MySQLStore(pool).steer(sid, Steer("waiting", "w"))
    assert [m.text for m in await (await _on_a_dead_connection(pool)).messages(sid)] == ["a"]
    assert [s.id for s in await (await _on_a_dead_connection(pool)).steers(sid)] == ["w"]
    await (await _on_a_dead_connection(pool)).steer(sid, Steer("again", "w"))
    assert [s.text for s in await MySQLStore(pool).steers(sid)] == ["waiting"]


async def test_a_save_on_a_dead_connection_is_not_sent_twice(pool: Any) -> None:
    # a save is not retried on another connection: had the first one committed, a second
    # would take more steers than the caller hears of
    sid = f"mysql-{new_id()}"
    await MySQLStore(pool).steer(sid, Steer("waiting", "w"))
    store = await _on_a_dead_connection(pool)
    with pytest.raises(StoreUnavailable, match="cannot reach the MySQL server"):
        await store.save(sid, [user("a")], at=0, take=16)
    assert await store.messages(sid) == []
    assert [m.id for m in await store.save(sid, [user("a")], at=0, take=16)] == ["w"]
    assert pool.size == pool.freesize  # the dead connection was dropped, none leaked
