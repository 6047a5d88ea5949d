"""The MySQL service reads beyond the contract: each bounded read walks a key in its order
(no filesort, no read of rows it does not return), and the stop poll reads only the
holder's own sessions, by the holder key."""

from __future__ import annotations

from typing import Any

from steerable.messages import new_id
from steerable.service_store import Input, Outcome
from steerable.stores.mysql import MySQLStore
from steerable.stores.mysql._rows import BY_STATE, INPUT
from steerable.stores.mysql._views import STOPPING, TURNS, WAITING


async def _plan(pool: Any, sql: str, args: tuple[Any, ...]) -> dict[str, dict[str, Any]]:
    """EXPLAIN of ``sql``: each table's row of the plan, by its name or alias."""
    async with pool.acquire() as connection, connection.cursor() as cursor:
        await cursor.execute(f"EXPLAIN {sql}", args)
        names = [d[0] for d in cursor.description]
        rows = [dict(zip(names, row, strict=True)) for row in await cursor.fetchall()]
        await connection.commit()
    return {str(row["table"]): row for row in rows}


async def _busy_session(store: MySQLStore, holder: str) -> str:
    """A session with a running turn asked to stop, ended turns and inputs of every state."""
    sid = f"my-views-{new_id()}"
    for i in range(6):
        await store.enqueue(sid, Input("send", f"m{i}", f"m{i}"))
    ended = await store.claim(holder, seconds=60, cap=4, session=sid)
    assert ended is not None
    await store.end_turn(ended.lease, Outcome("completed"))
    assert await store.claim(holder, seconds=60, cap=4, session=sid) is not None
    await store.cancel(sid, "m5")
    await store.stop(sid)
    return sid


async def test_the_stop_poll_is_a_ref_of_the_holder_key(store: MySQLStore, pool: Any) -> None:
    holder = f"h-{new_id()}"
    sid = await _busy_session(store, holder)
    plan = await _plan(pool, STOPPING, (holder,))
    assert (plan["s"]["type"], plan["s"]["key"]) == ("ref", "steerable_service_holder")
    assert "filesort" not in str(plan["s"]["Extra"])  # the key gives the session order
    assert (plan["t"]["type"], plan["t"]["key"]) == ("eq_ref", "PRIMARY")
    assert await store.stopping(holder) == [sid]


async def test_the_waiting_inputs_of_a_status_are_read_by_the_state_key(
    store: MySQLStore, pool: Any
) -> None:
    sid = await _busy_session(store, f"h-{new_id()}")
    plan = (await _plan(pool, WAITING, (sid, 2)))["steerable_inputs"]
    assert (plan["key"], "filesort" in str(plan["Extra"])) == ("steerable_inputs_state", False)
    by_state = f"{INPUT}{BY_STATE} WHERE session = %s AND state = %s AND seq > %s ORDER BY seq"
    plan = (await _plan(pool, by_state + " LIMIT 2", (sid, "waiting", 0)))["steerable_inputs"]
    assert (plan["key"], "filesort" in str(plan["Extra"])) == ("steerable_inputs_state", False)
    status = await store.status(sid, limit=2)
    assert [w.id for w in status.waiting] == ["m2", "m3"]
    assert (status.waiting_total, status.queued) == (3, 3)


async def test_a_page_of_turns_is_read_by_the_seq_key(store: MySQLStore, pool: Any) -> None:
    sid = await _busy_session(store, f"h-{new_id()}")
    plan = await _plan(pool, TURNS, (sid, 0, 1))
    assert (plan["t"]["key"], "filesort" in str(plan["t"]["Extra"])) == (
        "steerable_turns_seq",
        False,
    )
    assert [(t.id, t.state) for t in await store.turns(sid, after=0, limit=5)] == [
        ("m0", "completed"),
        ("m1", "running"),
    ]
