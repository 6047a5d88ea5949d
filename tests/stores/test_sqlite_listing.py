"""The SQLite store's session listing: the range of ids, its plan, the state filter's place."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from steerable.service_store import Input, SessionState, prefix_end
from steerable.stores._sqlite_views import listing_query
from steerable.stores.sqlite import SQLiteStore

_IDS = ["", "a", "a/", "a/b", "a/\U0010ffff", "a0", "b", "\ud7ff", "\ue000", "\U0010ffff", "z"]


@pytest.mark.parametrize(
    ("prefix", "end"),
    [
        ("", None),
        ("a/", "a0"),
        ("a\U0010ffff", "b"),
        ("\U0010ffff\U0010ffff", None),
        ("x\ud7ff", "x\ue000"),
    ],
)
def test_the_end_of_a_prefix_is_the_least_string_above_its_ids(
    prefix: str, end: str | None
) -> None:
    assert prefix_end(prefix) == end


@pytest.mark.parametrize("prefix", ["", "a", "a/", "\U0010ffff", "\ud7ff", "a\U0010ffff"])
def test_the_range_of_a_prefix_holds_exactly_its_ids(prefix: str) -> None:
    end = prefix_end(prefix)
    for id in _IDS + [prefix + s for s in _IDS]:
        inside = prefix <= id and (end is None or id < end)
        assert inside == id.startswith(prefix), id


def test_a_listing_is_a_range_scan_of_the_session_key(tmp_path: Path) -> None:
    # never a scan of every session: the bounds are on the primary key, the last event's
    # time one lookup on the events' key, whatever the state filter
    path = tmp_path / "plan.db"
    asyncio.run(_open(path))
    with sqlite3.connect(path) as db:
        cases: list[tuple[str | None, SessionState | None]] = [
            (None, None),
            ("a/x", "running"),
            (None, "idle"),
        ]
        for after, state in cases:
            sql, args = listing_query("a/", after, state)
            plan = [row[3] for row in db.execute(f"EXPLAIN QUERY PLAN {sql}", (*args, 10))]
            assert plan == [
                "SEARCH s USING INDEX sqlite_autoindex_steerable_service_1"
                " (session>? AND session<?)",
                "SEARCH e USING INDEX sqlite_autoindex_steerable_events_1"
                " (session=? AND id=?) LEFT-JOIN",
            ]


async def _open(path: Path) -> None:
    async with SQLiteStore(path):
        pass


async def test_the_state_filter_comes_before_the_limit(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "s.db") as store:
        for name in ("p/1", "p/2", "p/3"):
            await store.enqueue(name, Input("send", "hi"))
        assert await store.claim("a", seconds=60, cap=4, session="p/1") is not None
        page = await store.sessions(prefix="p/", after=None, limit=1, state="queued")
        assert [s.session for s in page] == ["p/2"]
        page = await store.sessions(prefix="p/", after="p/2", limit=1, state="queued")
        assert [s.session for s in page] == ["p/3"]
        assert await store.sessions(prefix="p/", after="p/1", limit=1, state="running") == []
