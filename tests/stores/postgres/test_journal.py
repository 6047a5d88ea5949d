"""What the Postgres tool journal does beyond the contract's journal cases.

Each race a statement can lose only while it waits is made deterministic by a row a
connection of the test holds in an open transaction, as a racing caller would: a begin
that waited on another's insert of its key reads what that one committed (its result
too), or begins the call itself if that one rolled back; an end that waited on another's
keeps the other's result. Then begins in four processes at once, at both isolations the
store runs under, of many keys in orders of their own: each key is new to exactly one.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest

from steerable.errors import SessionBusy
from steerable.journal import encode_result
from steerable.messages import ToolResult, new_id, user
from steerable.service_store import Input
from steerable.stores.postgres import PostgresStore
from tests.stores.postgres.support import DSN, until_lock_waits


def _sid() -> str:
    return f"pg-journal-{new_id()}"


def _result(content: str) -> ToolResult:
    return ToolResult("call-1", "pay", content, False)


@asynccontextmanager
async def _held(pool: Any) -> AsyncIterator[tuple[Any, Any]]:
    """A connection of ``pool`` in an open transaction (the test ends it), and that
    transaction; the pool rolls back one the test left open when it takes it back."""
    async with pool.acquire() as holder:
        transaction = holder.transaction()
        await transaction.start()
        yield holder, transaction


async def test_a_begin_that_waited_on_another_reads_the_result_it_committed(pool: Any) -> None:
    # The other caller began the call and, in the same transaction, ended it; this begin's
    # snapshot is older than that commit, so only a fresh read can tell it the result.
    store, sid, result = PostgresStore(pool), _sid(), _result("paid")
    await store.begin_calls(sid, ["warm"])  # prepared and checked before the race
    async with _held(pool) as (holder, transaction):
        await holder.execute(
            "INSERT INTO steerable_journal (session, key, result) VALUES ($1, 'k', $2)",
            sid,
            encode_result("k", result),
        )
        beginning = asyncio.create_task(store.begin_calls(sid, ["k", "mine"]))
        await until_lock_waits(pool, 1)
        await transaction.commit()
    assert await beginning == {"k": result}
    assert await store.begin_calls(sid, ["mine"]) == {"mine": None}


async def test_a_begin_that_waited_on_another_that_rolled_back_begins_the_call(
    pool: Any,
) -> None:
    store, sid = PostgresStore(pool), _sid()
    await store.begin_calls(sid, ["warm"])
    async with _held(pool) as (holder, transaction):
        await holder.execute("INSERT INTO steerable_journal (session, key) VALUES ($1, 'k')", sid)
        beginning = asyncio.create_task(store.begin_calls(sid, ["k"]))
        await until_lock_waits(pool, 1)
        await transaction.rollback()
    assert await beginning == {}
    assert await store.begin_calls(sid, ["k"]) == {"k": None}


async def test_an_end_that_waited_on_another_keeps_the_others_result(pool: Any) -> None:
    store, sid, first = PostgresStore(pool), _sid(), _result("paid once")
    await store.begin_calls(sid, ["k"])
    async with _held(pool) as (holder, transaction):
        await holder.execute(
            "UPDATE steerable_journal SET result = $2 WHERE session = $1 AND key = 'k'",
            sid,
            encode_result("k", first),
        )
        ending = asyncio.create_task(store.end_call(sid, "k", _result("paid twice")))
        await until_lock_waits(pool, 1)
        await transaction.commit()
    assert await ending == first
    assert await store.begin_calls(sid, ["k"]) == {"k": first}


async def test_a_delete_refused_keeps_the_journal(pool: Any) -> None:
    # The journal goes in the delete's own transaction: refused, it is all still there.
    store, sid = PostgresStore(pool), _sid()
    await store.save(sid, [user("hi")], at=0)
    await store.end_call(sid, "k", _result("paid"))
    await store.enqueue(sid, Input("send", "go", "t"))
    assert await store.claim("a", seconds=60, cap=16, session=sid) is not None
    with pytest.raises(SessionBusy):
        await store.delete(sid)
    assert await store.begin_calls(sid, ["k"]) == {"k": _result("paid")}


def _beginner(database: str, settings: dict[str, str], sid: str, go: Any, out: Any) -> None:
    """One process: four tasks that each begin every key of each round in an order of its
    own; puts the keys each task was told are new."""

    async def main() -> list[str]:
        pool = await asyncpg.create_pool(
            DSN, database=database, min_size=4, max_size=4, server_settings=settings
        )
        try:
            store = PostgresStore(pool)
            await store.begin_calls(sid, ["warm"])
            out.put("ready")
            await asyncio.get_running_loop().run_in_executor(None, go.wait, 60)
            new: list[str] = []

            async def task(seed: int) -> None:
                order = random.Random(seed)
                for round in range(20):
                    keys = [f"{round}-{i}" for i in range(8)]
                    order.shuffle(keys)
                    known = await store.begin_calls(sid, keys)
                    new.extend(key for key in keys if key not in known)

            await asyncio.gather(*(task(random.randrange(2**32)) for _ in range(4)))
            return new
        finally:
            await pool.close()

    try:
        out.put(asyncio.run(main()))
    except BaseException as exc:  # the parent fails fast with the real error
        out.put(f"beginner failed: {exc!r}")
        raise


@pytest.mark.parametrize("isolation", ["read committed", "repeatable read"])
async def test_begins_in_four_processes_tell_each_key_new_once(
    pool: Any, database: str, isolation: str
) -> None:
    sid = _sid()
    settings = {"default_transaction_isolation": isolation}
    context = multiprocessing.get_context("spawn")
    out, go = context.Queue(), context.Event()
    workers = [
        context.Process(target=_beginner, args=(database, settings, sid, go, out)) for _ in range(4)
    ]
    loop = asyncio.get_running_loop()
    for worker in workers:
        worker.start()
    try:
        for _ in workers:
            assert await loop.run_in_executor(None, out.get, True, 60) == "ready"
        go.set()
        results = [await loop.run_in_executor(None, out.get, True, 60) for _ in workers]
        for got in results:
            assert isinstance(got, list), got
    finally:
        go.set()
        for worker in workers:
            await loop.run_in_executor(None, worker.join, 30)
            if worker.is_alive():
                worker.kill()
    told_new = sorted(key for got in results for key in got)
    assert told_new == sorted(f"{r}-{i}" for r in range(20) for i in range(8))
    assert sum(1 for got in results if got) >= 2, "one process began everything: no race"
    rows = await pool.fetchval("SELECT count(*) FROM steerable_journal WHERE session = $1", sid)
    assert rows == 20 * 8 + 1
