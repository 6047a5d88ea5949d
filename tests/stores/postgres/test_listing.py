"""The Postgres listing of sessions beyond the contract: a range scan of the code-point index
of schema step 3 (never of every session, whatever the database's collation); the state
filter before the limit."""

from __future__ import annotations

from typing import Any

import pytest

from steerable.messages import new_id
from steerable.service_store import Input, SessionState
from steerable.stores.postgres import PostgresStore
from steerable.stores.postgres._views import _listing


@pytest.mark.parametrize(
    ("after", "state"), [(None, None), ("a/x", "running"), (None, "idle"), ("a/z", "queued")]
)
async def test_a_listing_is_a_range_scan_of_the_code_point_index(
    pool: Any, after: str | None, state: SessionState | None
) -> None:
    # A tiny table is read whole, whatever the indexes: forbid that (and the bitmap scan,
    # which gives no order), and the plan shows whether the index can bound the scan and
    # give its order, so a page reads its rows only (the primary key's collation is the
    # database's, not "C": it cannot).
    query, bounds = _listing("a/", after, state)
    async with pool.acquire() as connection, connection.transaction():
        await connection.execute("SET LOCAL enable_seqscan = off")
        await connection.execute("SET LOCAL enable_bitmapscan = off")
        plan = "\n".join(r[0] for r in await connection.fetch(f"EXPLAIN {query}", 10, *bounds))
    assert "Index Scan using steerable_sessions_listing on steerable_sessions" in plan
    assert "Index Cond: (((session)::text >= " in plan or "Index Cond: (((session)::text > " in plan
    assert "Sort" not in plan  # the index gives the order
    assert "Seq Scan" not in plan


async def test_the_state_filter_comes_before_the_limit(store: PostgresStore) -> None:
    prefix = f"pg-list-{new_id()}/"
    for name in ("1", "2", "3"):
        await store.enqueue(prefix + name, Input("send", "hi"))
    assert await store.claim("a", seconds=60, cap=4, session=prefix + "1") is not None
    page = await store.sessions(prefix=prefix, after=None, limit=1, state="queued")
    assert [s.session for s in page] == [prefix + "2"]
    page = await store.sessions(prefix=prefix, after=prefix + "2", limit=1, state="queued")
    assert [s.session for s in page] == [prefix + "3"]
    assert await store.sessions(prefix=prefix, after=prefix + "1", limit=1, state="running") == []


async def test_an_empty_prefix_lists_from_the_first_id(store: PostgresStore) -> None:
    # no upper bound: every session, in code-point order, from the start
    listed = await store.sessions(prefix="", after=None, limit=1000)
    ids = [s.session for s in listed]
    assert ids == sorted(ids)
    if ids:
        after = await store.sessions(prefix="", after=ids[0], limit=1)
        assert [s.session for s in after] == ids[1:2]
