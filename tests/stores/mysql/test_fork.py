"""What the MySQL fork does beyond the contract's fork cases: the copies keep their stored
times; a fork waits for a writer of the new session (a second fork, a save, a metadata
write) and then is refused; a deleted session can be forked into again; a fork leaves the
new session no service row; a missing message is refused before a taken session; forks
into the same sessions from four processes make each once."""

from __future__ import annotations

import asyncio
from decimal import Decimal
from typing import Any

import pytest

from steerable import codec
from steerable.errors import MessageNotFound, SessionExists
from steerable.messages import Message, assistant, new_id, user
from steerable.service_store import Input
from steerable.store import Steer
from steerable.stores.mysql import MySQLStore
from tests.stores.mysql import server
from tests.stores.racing import race


def _sid() -> str:
    return f"my-fork-{new_id()}"


async def _three(store: MySQLStore, sid: str) -> list[Message]:
    messages = [user("one"), assistant("two"), user("three")]
    await store.save(sid, messages, at=0)
    return messages


async def test_the_copies_keep_their_stored_times(store: MySQLStore) -> None:
    old, new = _sid(), _sid()
    await _three(store, old)
    # times far from now, so a copy stamped at the fork would differ
    await server.query(
        "UPDATE steerable_messages SET at = 1000.25 + position WHERE session = %s", (old,)
    )
    assert await store.fork(old, new) == 3
    copied = await store.transcript(new, after=-1, limit=10)
    assert [(e.message, e.at, e.turn) for e in copied] == [
        (e.message, e.at, None) for e in await store.transcript(old, after=-1, limit=10)
    ]
    rows = await server.query(
        "SELECT position, at FROM steerable_messages WHERE session = %s ORDER BY position",
        (new,),
    )
    assert [(int(p), at) for p, at in rows] == [(p, Decimal("1000.25") + p) for p in range(3)]


async def test_a_second_fork_into_a_session_waits_behind_the_first_and_is_refused() -> None:
    # The test holds the new session's core row (as a save into it would): the first fork
    # has made and locked the session's service row and waits for the core's; the second
    # waits for that service row. When the test lets go, the first copies and commits, and
    # the second then finds the session taken.
    first, second, new = _sid(), _sid(), _sid()
    async with server.pool_on() as pool_a, server.pool_on() as pool_b:
        a, b = MySQLStore(pool_a), MySQLStore(pool_b)
        kept = await _three(a, first)
        await a.save(second, [user("the second")], at=0)
        await b.check_schema()
        holder = await pool_a.acquire()
        try:
            async with holder.cursor() as cur:
                await cur.execute("START TRANSACTION")
                await cur.execute("INSERT INTO steerable_sessions (session) VALUES (%s)", (new,))
                winning = asyncio.create_task(a.fork(first, new))
                await server.until_lock_waits(pool_a, 1)
                losing = asyncio.create_task(b.fork(second, new))
                await server.until_lock_waits(pool_a, 2)
                await cur.execute("ROLLBACK")
        finally:
            await pool_a.release(holder)
        assert await winning == 3
        with pytest.raises(SessionExists):
            await losing
        assert await a.messages(new) == kept


async def test_a_fork_waits_for_a_save_into_the_session_and_is_refused() -> None:
    # the test writes as a save does: the session's core row, then a message, committed
    old, new = _sid(), _sid()
    async with server.pool_on() as pool:
        store = MySQLStore(pool)
        await _three(store, old)
        mine = user("mine")
        holder = await pool.acquire()
        try:
            async with holder.cursor() as cur:
                await cur.execute("START TRANSACTION")
                await cur.execute("INSERT INTO steerable_sessions (session) VALUES (%s)", (new,))
                await cur.execute(
                    "INSERT INTO steerable_messages (session, position, id, body)"
                    " VALUES (%s, 0, %s, %s)",
                    (new, mine.id, codec.encode(mine)),
                )
                forking = asyncio.create_task(store.fork(old, new))
                await server.until_lock_waits(pool, 1)
                await cur.execute("COMMIT")
        finally:
            await pool.release(holder)
        with pytest.raises(SessionExists):
            await forking
        assert await store.messages(new) == [mine]


async def test_a_fork_waits_for_a_metadata_write_into_the_session_and_is_refused() -> None:
    # metadata is written to the session's service row only (no core lock): the fork must
    # wait for that row, and then see the metadata
    old, new = _sid(), _sid()
    async with server.pool_on() as pool:
        store = MySQLStore(pool)
        await _three(store, old)
        holder = await pool.acquire()
        try:
            async with holder.cursor() as cur:
                await cur.execute("START TRANSACTION")
                await cur.execute(
                    "INSERT INTO steerable_service (session, metadata) VALUES (%s, %s)",
                    (new, '{"title":"mine"}'),
                )
                forking = asyncio.create_task(store.fork(old, new))
                await server.until_lock_waits(pool, 1)
                await cur.execute("COMMIT")
        finally:
            await pool.release(holder)
        with pytest.raises(SessionExists):
            await forking
        assert await store.messages(new) == []
        assert (await store.status(new)).metadata == {"title": "mine"}


async def test_a_deleted_session_can_be_forked_into_again(store: MySQLStore) -> None:
    old, target = _sid(), _sid()
    messages = await _three(store, old)
    await store.save(target, [user("mine")], at=0)
    await store.steer(target, Steer("taken", "s1"))
    await store.take_steers(target, at=None, limit=1)
    await store.steer(target, Steer("waiting", "s2"))
    await store.enqueue(target, Input("send", "queued", "i1"))
    await store.set_metadata(target, {"title": "mine"})
    with pytest.raises(SessionExists):
        await store.fork(old, target)
    assert await store.delete(target) is True
    assert await store.fork(old, target, through=messages[1].id) == 2
    assert await store.messages(target) == messages[:2]
    assert await store.steers(target) == []
    status = await store.status(target)
    assert (status.waiting_total, status.metadata, status.turn) == (0, {}, None)


async def test_a_taken_steer_alone_makes_a_session_exist(store: MySQLStore) -> None:
    # the core counts a steer id seen before forever: its row stays after the take
    old, target = _sid(), _sid()
    await _three(store, old)
    await store.steer(target, Steer("taken", "s1"))
    await store.take_steers(target, at=None, limit=1)
    await store.truncate(target, at=0)  # the transcript empty again, the steer's row kept
    assert await store.messages(target) == [] and await store.steers(target) == []
    with pytest.raises(SessionExists):
        await store.fork(old, target)


async def test_a_fork_leaves_the_new_session_no_service_row(store: MySQLStore) -> None:
    old, new = _sid(), _sid()
    await _three(store, old)
    assert await store.fork(old, new) == 3
    sql = "SELECT count(*) FROM steerable_service WHERE session = %s"
    assert int((await server.query(sql, (new,)))[0][0]) == 0


async def test_a_missing_message_is_named_before_a_taken_session(store: MySQLStore) -> None:
    # both refusals apply: the one the memory store (the reference) gives
    old, taken = _sid(), _sid()
    await _three(store, old)
    await store.save(taken, [user("mine")], at=0)
    with pytest.raises(MessageNotFound):
        await store.fork(old, taken, through="no-such-message")


def _forker(database: str, source: str, targets: list[str], together: Any, out: Any) -> None:
    """A process forking ``source`` into each of ``targets``, each fork started at once with
    the other processes' (``together``, a barrier); the source and the targets it won."""

    async def main() -> tuple[str, list[str]]:
        won: list[str] = []
        loop = asyncio.get_running_loop()
        async with server.open_store(database) as store:
            await store.messages(source)  # connected and checked before the race starts
            for target in targets:
                await loop.run_in_executor(None, together.wait, 60)
                try:
                    await store.fork(source, target)
                except SessionExists:
                    continue
                won.append(target)
        return source, won

    try:
        out.put(asyncio.run(main()))
    except BaseException as exc:  # the parent fails fast with the real error
        out.put(f"forker failed: {exc!r}")
        raise


async def test_forks_into_the_same_sessions_from_four_processes_make_each_once(
    store: MySQLStore, mysql_database: str
) -> None:
    sources = [_sid() for _ in range(4)]
    for k, source in enumerate(sources):  # of different lengths: a target shows who won it
        await store.save(source, [user(f"{k}: {n}") for n in range(k + 1)], at=0)
    targets = [_sid() for _ in range(40)]
    got = await race(_forker, [(mysql_database, s, targets) for s in sources])
    won: dict[str, list[str]] = dict(got)
    assert sorted(t for ts in won.values() for t in ts) == sorted(targets)  # each won once
    assert sum(1 for ts in won.values() if ts) >= 2, "one process won everything: no race"
    for source, wins in won.items():
        for target in wins:  # whole, and the winner's
            assert await store.messages(target) == await store.messages(source)
