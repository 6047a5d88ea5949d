"""The MySQL listing of sessions beyond the contract: a range scan of the session rows' key,
in the ids' byte order, never a read of every session; the state filter before the limit."""

from __future__ import annotations

from typing import Any

import pytest

from steerable.messages import new_id
from steerable.service_store import Input, SessionState
from steerable.stores.mysql import MySQLStore
from steerable.stores.mysql._views import listing_query


@pytest.mark.parametrize(
    ("after", "state"), [(None, None), ("a/x", "running"), (None, "idle"), ("a/z", "queued")]
)
async def test_a_listing_is_a_range_scan_of_the_session_key(
    pool: Any, after: str | None, state: SessionState | None
) -> None:
    sql, bounds = listing_query("a/", after, state)
    async with pool.acquire() as connection, connection.cursor() as cursor:
        await cursor.execute(f"EXPLAIN {sql}", (*bounds, 10))
        names = [d[0] for d in cursor.description]
        plan = [dict(zip(names, row, strict=True)) for row in await cursor.fetchall()]
    sessions = next(row for row in plan if row["table"] == "s")
    assert (sessions["type"], sessions["key"]) == ("range", "PRIMARY")
    assert "filesort" not in str(sessions["Extra"])  # the key gives the order
    events = next(row for row in plan if row["table"] == "e")
    assert (events["type"], events["key"]) == ("eq_ref", "PRIMARY")


async def test_the_state_filter_comes_before_the_limit(store: MySQLStore) -> None:
    prefix = f"my-list-{new_id()}/"
    for name in ("1", "2", "3"):
        await store.enqueue(prefix + name, Input("send", "hi"))
    assert await store.claim("a", seconds=60, cap=4, session=prefix + "1") is not None
    page = await store.sessions(prefix=prefix, after=None, limit=1, state="queued")
    assert [s.session for s in page] == [prefix + "2"]
    page = await store.sessions(prefix=prefix, after=prefix + "2", limit=1, state="queued")
    assert [s.session for s in page] == [prefix + "3"]
    assert await store.sessions(prefix=prefix, after=prefix + "1", limit=1, state="running") == []


async def test_ids_that_a_collation_would_call_equal_are_listed_apart(store: MySQLStore) -> None:
    # byte order: "a" and "a " and "A", "e\u0301" and "\u00e9" are distinct, in code points
    prefix = f"my-list-{new_id()}/"
    names = [prefix + n for n in ("a", "a ", "A", "e\u0301", "\u00e9", "\U0001f600", "\ue000")]
    for name in names:
        await store.enqueue(name, Input("send", "hi"))
    listed = await store.sessions(prefix=prefix, after=None, limit=100)
    assert [s.session for s in listed] == sorted(names)
