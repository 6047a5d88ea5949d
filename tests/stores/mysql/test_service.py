"""What the MySQL store's service tables do beyond the service contract: the upgrade from
schema 1, fencing by epoch alone refused whole (seen in the rows), the claim index, and
times that do not depend on a connection's time zone."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from steerable.errors import Fenced
from steerable.messages import assistant, user
from steerable.service_store import Input, Outcome
from steerable.store import Steer
from steerable.stores.mysql import MIGRATIONS, MySQLStore, migrate
from tests.stores.mysql import server


async def _rows(session: str) -> tuple[int, ...]:
    """How many rows the session has in each table the service writes."""
    counts = []
    for table in ("messages", "inputs", "turns", "events"):
        rows = await server.query(
            f"SELECT count(*) FROM steerable_{table} WHERE session = %s", (session,)
        )
        counts.append(int(rows[0][0]))
    return tuple(counts)


async def _claimable(session: str) -> Any:
    rows = await server.query(
        "SELECT claimable, expires FROM steerable_service WHERE session = %s", (session,)
    )
    return rows[0]


async def test_a_database_of_schema_1_upgrades_keeping_its_data(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with server.scratch_database() as pool:
        monkeypatch.setattr("steerable.stores.mysql._migrate.MIGRATIONS", MIGRATIONS[:1])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert await migrate(pool) == [1]
        monkeypatch.setattr("steerable.stores.mysql._store.MIGRATIONS", MIGRATIONS[:1])
        old = MySQLStore(pool)
        await old.save("s", [user("kept", id="k")], at=0)
        await old.steer("s", Steer("waits", "w"))
        monkeypatch.undo()
        assert await migrate(pool) == [2]
        store = MySQLStore(pool)
        assert [m.text for m in await store.messages("s")] == ["kept"]
        assert [s.id for s in await store.steers("s")] == ["w"]
        await store.enqueue("s", Input("send", "next", "n"))
        claim = await store.claim("a", seconds=60, cap=16, session="s")
        assert claim is not None
        assert (claim.start, [m.text for m in claim.messages]) == (1, ["kept"])


async def test_a_lease_of_an_older_epoch_is_refused_whole_even_from_the_same_holder(
    store: MySQLStore,
) -> None:
    sid = "fenced-by-epoch"
    await store.enqueue(sid, Input("send", "go", "p"))
    first = await store.claim("a", seconds=0.0, cap=16, session=sid)
    assert first is not None
    await store.enqueue(sid, Input("steer", "s", "s1"))
    second = await store.claim("a", seconds=60, cap=16, session=sid)  # the same holder again
    assert second is not None
    assert second.lease.epoch == first.lease.epoch + 1
    before = await _rows(sid)
    stale = first.lease
    with pytest.raises(Fenced):
        await store.step(stale, [user("go", id="p")], at=0, take=16)
    with pytest.raises(Fenced):
        await store.end_turn(stale, Outcome("completed", "x"))
    with pytest.raises(Fenced):
        await store.renew(stale, seconds=60)
    assert await _rows(sid) == before
    steered = await store.step(second.lease, [user("go", id="p")], at=0, take=16)
    assert [m.id for m in steered] == ["s1"]


async def test_only_sessions_with_work_are_in_the_claim_index(store: MySQLStore) -> None:
    sid = "indexed"
    await store.enqueue(sid, Input("send", "go", "p"))
    claimable, _ = await _claimable(sid)
    assert claimable == 0  # waiting, no lease: at once
    claim = await store.claim("a", seconds=60, cap=16, session=sid)
    assert claim is not None
    claimable, expires = await _claimable(sid)
    assert claimable == expires is not None  # running: once the lease expires
    await store.step(claim.lease, [user("go", id="p"), assistant("done")], at=0, take=0)
    await store.end_turn(claim.lease, Outcome("completed", "done"))
    claimable, _ = await _claimable(sid)
    assert claimable is None  # idle: not in the index at all


async def test_lease_times_do_not_depend_on_the_connection_s_time_zone() -> None:
    expiries = []
    for zone in ("+00:00", "+05:00", "-09:30"):
        sid = f"zone{zone}"
        async with server.open_store(server.DATABASE, init_command=f"SET time_zone = '{zone}'") as (
            store
        ):
            assert isinstance(store, MySQLStore)
            await store.enqueue(sid, Input("send", "go", "p"))
            claim = await store.claim("a", seconds=3600, cap=16, session=sid)
            assert claim is not None
            expiries.append(claim.lease.expires_at)
            events = await store.events(sid, after=0, limit=10)
            assert all(abs(e.at - (claim.lease.expires_at - 3600)) < 600 for e in events)
    assert max(expiries) - min(expiries) < 600  # the zones are hours apart


async def test_a_scanning_claim_finds_a_session_a_view_holds_in_share_mode(
    store: MySQLStore, pool: Any
) -> None:
    """SKIP LOCKED skips a row a view reads in share mode: the scan must not miss its work."""
    import asyncio

    sid = "read-while-claimed"
    await store.enqueue(sid, Input("send", "go"))
    async with pool.acquire() as reader, reader.cursor() as cursor:
        await reader.begin()
        await cursor.execute(
            "SELECT session FROM steerable_service WHERE session = %s LOCK IN SHARE MODE", (sid,)
        )

        async def scan() -> list[str]:
            claimed = []
            while (claim := await store.claim("a", seconds=60, cap=16)) is not None:
                claimed.append(claim.lease.session)
            return claimed

        task = asyncio.create_task(scan())
        await asyncio.sleep(0.3)
        await reader.rollback()
        claimed = await task
    assert sid in claimed
