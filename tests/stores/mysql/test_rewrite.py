"""What the MySQL cut and delete do beyond the contract's rewrite cases: a claim that found
its session while a cut held it reads the cut transcript; a session the service never saw
gets no service row from either verb; a deleted session is not listed."""

from __future__ import annotations

import asyncio

from steerable.messages import new_id
from steerable.service_store import Input
from steerable.stores.mysql import MySQLStore, migrate
from tests.stores.mysql import server
from tests.stores.transcripts import five


def _sid() -> str:
    return f"my-rewrite-{new_id()}"


async def test_a_claim_that_waited_behind_a_cut_reads_the_cut_transcript() -> None:
    # The cut holds the session's service row and waits for the core's row, which the test
    # holds. A claim of any session skips the locked row, finds it with a plain read (which
    # takes a REPEATABLE READ snapshot) and waits for the lock: after it, it must read the
    # transcript as the cut left it, not as that snapshot had it. Its own database, so the
    # session is the only one a claim can find.
    async with server.scratch_database() as pool:
        await migrate(pool)
        store, sid = MySQLStore(pool), _sid()
        messages = await five(store, sid)
        await store.enqueue(sid, Input("send", "go", "t"))
        holder = await pool.acquire()
        try:
            async with holder.cursor() as cur:
                await cur.execute("START TRANSACTION")
                await cur.execute(
                    "SELECT session FROM steerable_sessions WHERE session = %s FOR UPDATE", (sid,)
                )
                cutting = asyncio.create_task(store.truncate(sid, at=2))
                await server.until_lock_waits(pool, 1)
                claiming = asyncio.create_task(store.claim("a", seconds=60, cap=16))
                await server.until_lock_waits(pool, 2)
                await cur.execute("ROLLBACK")
        finally:
            await pool.release(holder)
        assert await cutting == messages[2:]
        claim = await claiming
        assert claim is not None and claim.turn == "t"
        assert claim.messages == messages[:2] and claim.start == 2


async def test_a_session_the_service_never_saw_gets_no_service_row(store: MySQLStore) -> None:
    sid = _sid()

    async def rows() -> int:
        sql = "SELECT count(*) FROM steerable_service WHERE session = %s"
        return int((await server.query(sql, (sid,)))[0][0])

    await five(store, sid)
    await store.truncate(sid, at=3)
    assert await rows() == 0
    assert await store.delete(sid) is True
    assert await store.delete(sid) is False
    assert await rows() == 0


async def test_a_deleted_session_is_not_listed(store: MySQLStore) -> None:
    prefix = f"my-listed-{new_id()}/"
    for name in ("a", "b"):
        await store.enqueue(prefix + name, Input("send", "go", "t"))
    assert await store.delete(prefix + "a") is True
    listed = await store.sessions(prefix=prefix, after=None, limit=10)
    assert [s.session for s in listed] == [prefix + "b"]
    await store.enqueue(prefix + "a", Input("send", "again", "t"))
    listed = await store.sessions(prefix=prefix, after=None, limit=10)
    assert [(s.session, s.state, s.queued) for s in listed] == [
        (prefix + "a", "queued", 1),
        (prefix + "b", "queued", 1),
    ]
