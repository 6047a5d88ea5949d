"""What the Postgres fork does beyond the contract's fork cases (``forkable``): four round
trips whatever the length; the copies keep their stored times; a claim of the new session
waits for the fork and starts after the copies; a save into the new session that commits
while the copy waits refuses the fork; a fork leaves the service no row of its own; forks
into one id from two processes make it once. Each race is made deterministic by a key a
connection of the test holds with an uncommitted insert."""

from __future__ import annotations

import asyncio
import multiprocessing
from typing import Any

import pytest

from steerable import codec
from steerable.errors import MessageNotFound, SessionExists
from steerable.messages import Message, assistant, new_id, user
from steerable.service_store import Claim, Input, Outcome
from steerable.stores.postgres import PostgresStore
from tests.stores.postgres.support import DSN, create_pool, open_store
from tests.stores.postgres.wire import Wire, no_reset

_WAITING = (
    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
    " AND cardinality(pg_blocking_pids(pid)) > 0 AND datname = current_database()"
)

_HOLD_POSITION = """
INSERT INTO steerable_messages (session, position, id, body) VALUES ($1, 0, $2, $3)
"""


def _sid() -> str:
    return f"pg-fork-{new_id()}"


def _conversation(n: int) -> list[Message]:
    return [user(f"m{i}") if i % 2 == 0 else assistant(f"a{i}") for i in range(n)]


async def _until_waiting(pool: Any, count: int, *tasks: asyncio.Task[Any]) -> None:
    """Until ``count`` backends wait on a lock someone holds, or one of ``tasks`` is done."""
    for _ in range(2000):
        if any(t.done() for t in tasks) or await pool.fetchval(_WAITING) >= count:
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"{count} statements never waited on a lock")


async def test_a_fork_is_four_round_trips_whatever_the_length(wire: Wire, database: str) -> None:
    pool = await create_pool(
        database, host="127.0.0.1", port=wire.port, min_size=1, max_size=1, reset=no_reset
    )
    try:
        store = PostgresStore(pool)
        short, long = _sid(), _sid()
        await store.save(short, _conversation(3), at=0)
        await store.save(long, _conversation(500), at=0)
        await store.fork(short, _sid())  # prepares the statements
        for source, count in ((short, 3), (long, 500)):
            wire.sent.clear()
            assert await store.fork(source, _sid()) == count
            # BEGIN, the row's lock, the copy, COMMIT
            assert (wire.round_trips, wire.sent["E"], wire.sent["P"]) == (4, 2, 0), wire.sent
    finally:
        await pool.close()


async def test_the_copies_keep_their_stored_times(pool: Any) -> None:
    store, old, new = PostgresStore(pool), _sid(), _sid()
    await store.save(old, _conversation(4), at=0)
    await pool.execute(
        "UPDATE steerable_messages SET at = CASE WHEN position = 2 THEN NULL"
        " ELSE '2001-02-03 04:05:06+00'::timestamptz + position * interval '1 second' END"
        " WHERE session = $1",
        old,
    )
    assert await store.fork(old, new) == 4
    times = [e.at for e in await store.transcript(new, after=-1, limit=10)]
    # a message stored before schema step 4 has no time, and its copy has none either
    assert times == [981173106.0, 981173107.0, None, 981173109.0]


async def test_a_claim_of_the_new_session_waits_for_the_fork(pool: Any) -> None:
    # The copy waits on a position the test holds. A send and a claim of the new session
    # meanwhile must queue behind the fork's lock of the session's row: a claim that read
    # the empty transcript would start its turn at 0, under the copies about to commit.
    store, old, new = PostgresStore(pool), _sid(), _sid()
    messages = _conversation(3)
    await store.save(old, messages, at=0)

    async def send_and_claim() -> Claim | None:
        await store.enqueue(new, Input("send", "go on", "p1"))
        return await store.claim("replica", seconds=30, cap=4, session=new)

    async with pool.acquire() as holder:
        transaction = holder.transaction()
        await transaction.start()
        await holder.execute(_HOLD_POSITION, new, "held", codec.encode(user("held")))
        forking = asyncio.create_task(store.fork(old, new))
        await _until_waiting(pool, 1, forking)
        claiming = asyncio.create_task(send_and_claim())
        await _until_waiting(pool, 2, forking, claiming)
        await transaction.rollback()
    assert await forking == 3
    claim = await claiming
    assert claim is not None
    assert (claim.start, claim.messages) == (3, messages)


async def test_a_save_into_the_new_session_committed_first_refuses_the_fork(pool: Any) -> None:
    store, old, new = PostgresStore(pool), _sid(), _sid()
    await store.save(old, _conversation(3), at=0)
    held = user("held")
    async with pool.acquire() as holder:
        transaction = holder.transaction()
        await transaction.start()
        await holder.execute(_HOLD_POSITION, new, held.id, codec.encode(held))
        forking = asyncio.create_task(store.fork(old, new))
        await _until_waiting(pool, 1, forking)
        await transaction.commit()
    with pytest.raises(SessionExists):
        await forking
    assert await store.messages(new) == [held]


async def test_a_fork_leaves_the_service_no_row_of_its_own(pool: Any) -> None:
    store, old, fresh, deleted, missing = PostgresStore(pool), _sid(), _sid(), _sid(), _sid()
    messages = _conversation(3)
    await store.save(old, messages, at=0)
    await store.enqueue(deleted, Input("send", "before", "b1"))
    claim = await store.claim("replica", seconds=30, cap=4, session=deleted)
    assert claim is not None
    await store.end_turn(claim.lease, Outcome("completed", "done"))
    assert await store.delete(deleted)
    epoch = await pool.fetchval("SELECT epoch FROM steerable_sessions WHERE session = $1", deleted)
    assert await store.fork(old, fresh, through=messages[1].id) == 2
    assert await store.fork(old, deleted) == 3
    with pytest.raises(MessageNotFound):
        await store.fork(old, missing, through="nowhere")
    rows = await pool.fetch(
        "SELECT session, epoch FROM steerable_sessions WHERE session = ANY($1::text[])",
        [fresh, deleted, missing],
    )
    # the deleted session's row keeps its epoch, so its stale holder stays fenced
    assert [tuple(r) for r in rows] == [(deleted, epoch)]
    assert epoch > 0


def _process_forks(source: str, targets: list[str], database: str, go: Any, out: Any) -> None:
    """Fork ``source`` into each of ``targets`` once ``go`` is set; which forks it won."""

    async def main() -> list[bool]:
        async with open_store(DSN, database) as store:
            await store.messages(source)  # connected and ready before the race starts
            out.put("ready")
            await asyncio.get_running_loop().run_in_executor(None, go.wait, 60)
            won = []
            for target in targets:
                try:
                    await store.fork(source, target)
                except SessionExists:
                    won.append(False)
                else:
                    won.append(True)
            return won

    try:
        out.put(asyncio.run(main()))
    except BaseException as exc:  # the parent fails fast with the real error
        out.put(f"forker failed: {exc!r}")
        raise


async def test_forks_into_one_id_from_two_processes_make_it_once(pool: Any, database: str) -> None:
    store = PostgresStore(pool)
    sources = [_sid(), _sid()]
    for i, source in enumerate(sources):
        await store.save(source, _conversation(20 + i), at=0)
    targets = [_sid() for _ in range(40)]
    context = multiprocessing.get_context("spawn")
    out, go = context.Queue(), context.Event()
    workers = [
        context.Process(target=_process_forks, args=(s, targets, database, go, out))
        for s in sources
    ]
    loop = asyncio.get_running_loop()
    for worker in workers:
        worker.start()
    try:
        for _ in workers:
            assert await loop.run_in_executor(None, out.get, True, 120) == "ready"
        go.set()
        results = [await loop.run_in_executor(None, out.get, True, 120) for _ in workers]
    finally:
        go.set()
        for worker in workers:
            await loop.run_in_executor(None, worker.join, 30)
            if worker.is_alive():
                worker.kill()
    for got in results:
        assert isinstance(got, list), got
    lengths = {len(await store.messages(s)) for s in sources}
    for i, target in enumerate(targets):
        assert sum(1 for won in results if won[i]) == 1, target
        assert len(await store.messages(target)) in lengths
