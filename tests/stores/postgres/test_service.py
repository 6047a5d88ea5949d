"""What the Postgres service tables do beyond the service contract (test_service_contract.py):
one round trip per verb, counted on the wire; a statement that waited on the session's lock
runs again on what the writer before it committed; a refusal writes no row; the scan of a
claim reads the index of the sessions with work."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from steerable.errors import (
    Fenced,
    QueueFull,
    SessionNotIdle,
    StoreError,
    TranscriptConflict,
    TurnMismatch,
)
from steerable.messages import assistant, new_id, user
from steerable.service_store import Input, Lease, Outcome
from steerable.stores.postgres import PostgresStore
from tests.stores.postgres.support import create_pool, until_waiting_on_a_lock
from tests.stores.postgres.wire import Wire, no_reset

_TABLES = ("steerable_sessions", "steerable_inputs", "steerable_turns", "steerable_events")


def _sid() -> str:
    return f"pg-service-{new_id()}"


async def _rows(pool: Any, sid: str) -> dict[str, list[Any]]:
    """Every row the service tables and the transcript hold for ``sid``, as text."""
    rows: dict[str, list[Any]] = {}
    for table in (*_TABLES, "steerable_messages"):
        rows[table] = await pool.fetch(
            f"SELECT t::text FROM {table} t WHERE session = $1 ORDER BY t::text", sid
        )
    return rows


async def test_every_verb_is_one_round_trip(wire: Wire, database: str) -> None:
    pool = await create_pool(
        database, host="127.0.0.1", port=wire.port, min_size=1, max_size=1, reset=no_reset
    )
    try:
        store = PostgresStore(pool)

        async def trips(verb: Any) -> int:
            wire.sent.clear()
            await verb
            assert wire.sent["P"] == 0, wire.sent  # prepared before: no parse on the way
            return wire.round_trips

        # a turn, once through, prepares every statement on the one connection
        for sid in (_sid(), _sid()):
            await store.enqueue(sid, Input("send", "go", "t"))
            claim = await store.claim("a", seconds=60, cap=16, session=sid)
            assert claim is not None
            await store.enqueue(sid, Input("steer", "s"))
            await store.renew(claim.lease, seconds=60)
            await store.step(claim.lease, [claim.prompt.message(steered=False)], at=0, take=16)
            await store.stop(sid)
            await store.end_turn(claim.lease, Outcome("stopped"))
        sid = _sid()
        await store.enqueue(sid, Input("send", "first"))  # a session's first: its row too
        assert await trips(store.enqueue(sid, Input("send", "go", "t"))) == 1
        claim = await store.claim("a", seconds=60, cap=16, session=sid)
        assert claim is not None
        assert await trips(store.enqueue(sid, Input("steer", "use celsius", "s1"))) == 1
        assert await trips(store.renew(claim.lease, seconds=60)) == 1
        first = [claim.prompt.message(steered=False)]
        assert await trips(store.step(claim.lease, first, at=0, take=16)) == 1  # a steer taken
        answer = [assistant("calling"), user("result")]
        assert await trips(store.step(claim.lease, answer, at=2, take=16)) == 1  # nobody steered
        assert await trips(store.stop(sid)) == 1
        assert await trips(store.end_turn(claim.lease, Outcome("stopped"))) == 1
        assert await trips(store.claim("a", seconds=60, cap=16, session=sid)) == 1
    finally:
        await pool.close()


async def test_the_queue_s_verbs_are_one_round_trip_each(wire: Wire, database: str) -> None:
    # the verbs of the queue's contract: conditions, refusals, cancel, the stop poll, the
    # bounded and paged views and the session's metadata, each one statement
    pool = await create_pool(
        database, host="127.0.0.1", port=wire.port, min_size=1, max_size=1, reset=no_reset
    )
    try:
        store = PostgresStore(pool)

        async def trips(verb: Any, refused: type[StoreError] | None = None) -> tuple[int, int]:
            """The verb's round trips and parses (0 once the statement is prepared)."""
            wire.sent.clear()
            if refused is None:
                await verb
            else:
                with pytest.raises(refused):
                    await verb
            return wire.round_trips, wire.sent["P"]

        async def every_verb(sid: str) -> dict[str, tuple[int, int]]:
            counted: dict[str, tuple[int, int]] = {}
            counted["set_metadata"] = await trips(store.set_metadata(sid, {"title": "t"}))
            await store.enqueue(sid, Input("send", "first", "f"))  # a session's first: its row
            counted["if_idle refused"] = await trips(
                store.enqueue(sid, Input("send", "no", "n"), if_idle=True), SessionNotIdle
            )
            counted["enqueue, conditions met"] = await trips(
                store.enqueue(sid, Input("steer", "to f", "s"), expected_turn="f", max_waiting=9)
            )
            counted["max_waiting refused"] = await trips(
                store.enqueue(sid, Input("send", "no", "n"), max_waiting=2), QueueFull
            )
            counted["cancel"] = await trips(store.cancel(sid, "s"))
            counted["cancel, unchanged"] = await trips(store.cancel(sid, "s"))
            claim = await store.claim("h", seconds=60, cap=16, session=sid)
            assert claim is not None
            await store.stop(sid)
            counted["stopping"] = await trips(store.stopping("h"))
            counted["status"] = await trips(store.status(sid, limit=1))
            counted["inputs"] = await trips(store.inputs(sid, after=0, limit=10))
            counted["inputs, waiting"] = await trips(
                store.inputs(sid, after=0, limit=10, state="waiting")
            )
            counted["turns"] = await trips(store.turns(sid, after=0, limit=10))
            counted["turn"] = await trips(store.turn(sid, "f"))
            counted["transcript"] = await trips(store.transcript(sid, after=-1, limit=10))
            counted["sessions"] = await trips(store.sessions(prefix=sid, after=None, limit=10))
            counted["end_turn"] = await trips(store.end_turn(claim.lease, Outcome("stopped")))
            return counted

        await every_verb(_sid())  # prepares every statement on the one connection
        counted = await every_verb(_sid())
        assert counted == dict.fromkeys(counted, (1, 0)), counted
    finally:
        await pool.close()


async def test_a_step_that_waited_on_the_lock_takes_the_steer_committed_meanwhile(
    pool: Any, store: PostgresStore
) -> None:
    # The step's snapshot is taken before it waits: without the version check it would not
    # see the steer, and would number its events over the enqueue's.
    sid = _sid()
    await store.enqueue(sid, Input("send", "go", "t"))
    claim = await store.claim("a", seconds=60, cap=16, session=sid)
    assert claim is not None
    async with pool.acquire() as other:
        enqueue = other.transaction()
        await enqueue.start()
        await PostgresStore(other).enqueue(sid, Input("steer", "late", "s"))  # holds the lock
        step = asyncio.create_task(
            store.step(claim.lease, [claim.prompt.message(steered=False)], at=0, take=16)
        )
        await until_waiting_on_a_lock(pool, "the statement")
        await enqueue.commit()
        taken = await step
    assert [m.id for m in taken] == ["s"]
    events = await store.events(sid, after=0, limit=100)
    assert [e.id for e in events] == list(range(1, len(events) + 1))
    assert [m.id for m in await store.messages(sid)] == ["t", "s"]


async def test_a_claim_that_waited_on_the_lock_finds_the_lease_its_winner_took(
    pool: Any, store: PostgresStore
) -> None:
    sid = _sid()
    await store.enqueue(sid, Input("send", "go", "t"))
    async with pool.acquire() as other:
        winner = other.transaction()
        await winner.start()
        won = await PostgresStore(other).claim("a", seconds=60, cap=16, session=sid)
        assert won is not None
        loser = asyncio.create_task(store.claim("b", seconds=60, cap=16, session=sid))
        await until_waiting_on_a_lock(pool, "the statement")
        await winner.commit()
        assert await loser is None
    status = await store.status(sid)
    assert status.turn is not None and (status.turn.holder, status.turn.epoch) == ("a", 1)


async def test_a_lease_of_another_holder_or_of_no_turn_writes_no_row(
    pool: Any, store: PostgresStore
) -> None:
    sid = _sid()
    await store.enqueue(sid, Input("send", "go", "t"))
    claim = await store.claim("a", seconds=60, cap=16, session=sid)
    assert claim is not None
    await store.enqueue(sid, Input("steer", "keep me", "s"))
    before = await _rows(pool, sid)
    other = Lease(sid, "b", claim.lease.epoch, claim.lease.expires_at)  # right epoch, not b's
    prompt = [claim.prompt.message(steered=False)]
    with pytest.raises(Fenced):
        await store.step(other, prompt, at=0, take=16)
    with pytest.raises(Fenced):
        await store.renew(other, seconds=60)
    with pytest.raises(Fenced):
        await store.end_turn(other, Outcome("completed"))
    assert await _rows(pool, sid) == before
    await store.end_turn(claim.lease, Outcome("failed", error="boom"))
    ended = await _rows(pool, sid)
    with pytest.raises(Fenced):  # its turn is over: the lease holds nothing now
        await store.step(claim.lease, prompt, at=0, take=16)
    nobody = Lease(_sid(), "a", 1, claim.lease.expires_at)  # a session nobody wrote to
    with pytest.raises(Fenced):
        await store.step(nobody, prompt, at=0, take=16)
    assert await _rows(pool, sid) == ended
    assert await _rows(pool, nobody.session) == {t: [] for t in before}


async def test_a_claim_of_any_session_reads_the_index_of_sessions_with_work(pool: Any) -> None:
    # A tiny table is read whole, whatever the indexes: forbid that, and the plan shows
    # whether the partial index can serve the scan (its predicate implied by the query's).
    from steerable.stores.postgres._service import _CLAIM_ANY

    lock = _CLAIM_ANY.strip().removeprefix("locked AS (").removesuffix(")")
    async with pool.acquire() as connection, connection.transaction():
        await connection.execute("SET LOCAL enable_seqscan = off")
        plan = await connection.fetch(f"EXPLAIN {lock}")
    assert "steerable_sessions_work" in "\n".join(row[0] for row in plan)


@pytest.mark.parametrize(
    ("query", "index"),
    [("_STOPPING", "steerable_sessions_holder"), ("_TURNS", "steerable_turns_seq")],
    ids=["stopping", "turns"],
)
async def test_the_poll_and_the_pages_of_turns_read_their_indexes(
    pool: Any, query: str, index: str
) -> None:
    # as above: the plan with sequential scans forbidden names the index the query needs
    from steerable.stores.postgres import _views

    statement = getattr(_views, query)
    async with pool.acquire() as connection, connection.transaction():
        await connection.execute("SET LOCAL enable_seqscan = off")
        await connection.execute(f"PREPARE probe AS {statement}")
        args = ("'h'",) if query == "_STOPPING" else ("'s'", "0", "10")
        plan = await connection.fetch(f"EXPLAIN EXECUTE probe ({', '.join(args)})")
        await connection.execute("DEALLOCATE probe")
    assert index in "\n".join(row[0] for row in plan)


async def test_a_refused_input_writes_no_row_not_even_the_session_s(
    pool: Any, store: PostgresStore
) -> None:
    sid = _sid()
    with pytest.raises(TurnMismatch):
        await store.enqueue(sid, Input("steer", "for t", "s"), expected_turn="t")
    with pytest.raises(QueueFull):
        await store.enqueue(sid, Input("send", "go", "t"), max_waiting=0)
    assert await _rows(pool, sid) == {t: [] for t in (*_TABLES, "steerable_messages")}
    await store.enqueue(sid, Input("send", "go", "t"))
    before = await _rows(pool, sid)
    with pytest.raises(SessionNotIdle):
        await store.enqueue(sid, Input("send", "again", "u"), if_idle=True)
    with pytest.raises(TurnMismatch):
        await store.enqueue(sid, Input("steer", "for u", "s"), expected_turn="u")
    with pytest.raises(QueueFull):
        await store.enqueue(sid, Input("steer", "for t", "s"), max_waiting=1)
    assert await _rows(pool, sid) == before


async def test_a_claim_s_prompt_carries_its_metadata(store: PostgresStore) -> None:
    # (the memory reference gives the Input as it was sent; no contract case asks yet)
    sid = _sid()
    sent = Input("send", "go", "t", {"from": "web", "n": [1, None]})
    await store.enqueue(sid, sent)
    claim = await store.claim("a", seconds=60, cap=16, session=sid)
    assert claim is not None and claim.prompt == sent


async def test_the_transcript_the_service_writes_is_the_core_s(store: PostgresStore) -> None:
    # one messages table: what step wrote, the core reads, and a core save the claim sees
    sid = _sid()
    await store.save(sid, [user("before")], at=0)
    await store.enqueue(sid, Input("send", "go", "t"))
    claim = await store.claim("a", seconds=60, cap=16, session=sid)
    assert claim is not None and [m.id for m in claim.messages] == [
        m.id for m in await store.messages(sid)
    ]
    await store.step(claim.lease, [claim.prompt.message(steered=False)], at=1, take=0)
    assert [m.text for m in await store.messages(sid)] == ["before", "go"]


async def test_a_second_pool_sees_the_same_answers(database: str, store: PostgresStore) -> None:
    sid = _sid()
    await store.enqueue(sid, Input("send", "go", "t"))
    other_pool = await create_pool(database)
    try:
        other = PostgresStore(other_pool)
        again = await other.enqueue(sid, Input("send", "go", "t"))
        assert again.duplicate and again.seq == 1
        assert await other.status(sid) == await store.status(sid)
    finally:
        await other_pool.close()


async def test_renew_many_is_one_round_trip_and_no_lease_is_none(wire: Wire, database: str) -> None:
    """Twenty leases, one of them stale, renew in one trip; ``[]`` reaches nothing."""
    pool = await create_pool(
        database, host="127.0.0.1", port=wire.port, min_size=1, max_size=1, reset=no_reset
    )
    try:
        store = PostgresStore(pool)
        leases = []
        for _ in range(20):
            sid = _sid()
            await store.enqueue(sid, Input("send", "go"))
            claim = await store.claim("a", seconds=60, cap=16, session=sid)
            assert claim is not None
            leases.append(claim.lease)
        await store.renew_many(leases[:1], seconds=60)  # prepared on the one connection
        stale = Lease(leases[5].session, "a", leases[5].epoch - 1, 0.0)
        wire.sent.clear()
        answers = await store.renew_many([*leases, stale], seconds=60)
        assert wire.sent["P"] == 0 and wire.round_trips == 1, wire.sent
        assert [a is not None for a in answers] == [True] * 20 + [False]
        wire.sent.clear()
        assert await store.renew_many([], seconds=60) == []
        assert wire.round_trips == 0 and not wire.sent, wire.sent
    finally:
        await pool.close()


async def test_an_end_with_its_last_save_is_one_round_trip(wire: Wire, database: str) -> None:
    """The answer saved and the turn ended in one trip, where a step then an end were two;
    refused (a wrong position), it is one trip too, and ends nothing."""
    pool = await create_pool(
        database, host="127.0.0.1", port=wire.port, min_size=1, max_size=1, reset=no_reset
    )
    try:
        store = PostgresStore(pool)

        async def begun() -> tuple[str, Lease]:
            sid = _sid()
            await store.enqueue(sid, Input("send", "go", "t"))
            claim = await store.claim("a", seconds=60, cap=16, session=sid)
            assert claim is not None
            await store.step(claim.lease, [claim.prompt.message(steered=False)], at=0, take=16)
            return sid, claim.lease

        sid, lease = await begun()  # prepares the statement on the one connection
        await store.end_turn(lease, Outcome("completed", "a"), last=[assistant("a")], at=1)
        sid, lease = await begun()
        await store.enqueue(sid, Input("steer", "late", "s"))
        wire.sent.clear()
        answer = assistant("done")
        following = await store.end_turn(lease, Outcome("completed", "done"), last=[answer], at=1)
        assert wire.sent["P"] == 0 and wire.round_trips == 1, wire.sent
        assert following == "s" and [m.id for m in await store.messages(sid)] == ["t", answer.id]
        sid, lease = await begun()
        wire.sent.clear()
        with pytest.raises(TranscriptConflict):
            await store.end_turn(lease, Outcome("completed"), last=[assistant("x")], at=3)
        assert wire.sent["P"] == 0 and wire.round_trips == 1, wire.sent
        assert (await store.status(sid)).turn is not None
    finally:
        await pool.close()
