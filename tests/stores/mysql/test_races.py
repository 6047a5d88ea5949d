"""Races a save can lose only while it waits on a lock: forced by holding the lock.

Another connection holds the oldest waiting steer's row (``SELECT ... FOR UPDATE`` in an
open transaction); two saves of the session are sent; then it lets go. The procedure's
session lock and its read after that lock must make the second one see the first.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiomysql  # type: ignore[import-untyped]
import pytest

from steerable.errors import TranscriptConflict
from steerable.messages import assistant, new_id, user
from steerable.store import Steer
from steerable.stores.mysql import MySQLStore
from tests.stores.mysql import server


async def _waiting(count: int) -> None:
    """Until ``count`` transactions of this database wait on a row lock (a bounded poll)."""
    for _ in range(200):
        rows = await server.query(
            "SELECT count(*) FROM information_schema.INNODB_TRX t"
            " JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id"
            " WHERE t.trx_state = 'LOCK WAIT' AND p.DB = %s",
            (server.DATABASE,),
        )
        if int(rows[0][0]) >= count:
            return
        await asyncio.sleep(0.15)  # the server refreshes INNODB_TRX at most every 0.1 s
    raise AssertionError(f"{count} transactions never waited on a lock")


@pytest.mark.parametrize("autocommit", [False, True], ids=["no-autocommit", "autocommit"])
async def test_the_loser_of_a_race_for_one_position_is_told(autocommit: bool) -> None:
    sid = f"mysql-race-{new_id()}"
    async with server.pool_on(maxsize=3, autocommit=autocommit) as pool:
        store = MySQLStore(pool)
        await store.save(sid, [user("go"), assistant("calling"), user("result")], at=0)
        await store.steer(sid, Steer("use celsius", "s1"))
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
                    "SELECT seq FROM steerable_steers WHERE session = %s AND id = 's1' FOR UPDATE",
                    (sid,),
                )
                saves = [asyncio.create_task(store.save(sid, [], at=3, take=16)) for _ in "ab"]
                await _waiting(2)
                await cur.execute("ROLLBACK")
            results: list[Any] = await asyncio.gather(*saves, return_exceptions=True)
        finally:
            holder.close()
        assert sorted(type(r).__name__ for r in results) == ["TranscriptConflict", "list"]
        won = next(r for r in results if isinstance(r, list))
        lost = next(r for r in results if isinstance(r, TranscriptConflict))
        assert [m.id for m in won] == ["s1"]
        assert (lost.expected, lost.stored) == (3, 4)
        assert [m.id for m in await store.messages(sid)][3:] == ["s1"]
