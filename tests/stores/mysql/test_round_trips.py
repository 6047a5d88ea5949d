"""A step costs one round trip: the save and the take are one statement, the core's and the
service's (fenced) alike; an end that carries the turn's last save costs one statement
more than an end without it, a claim that makes the turn's first step two more than one
without it (four to take steers). A fork is the same eight statements however many messages it
copies: the server copies them.

Counted by the server: ``Questions`` counts the statements a client sent on its
connection (not those a stored procedure runs), read before and after on the pool's only
connection.
"""

from __future__ import annotations

from typing import Any

import pytest

from steerable.messages import assistant, new_id, user
from steerable.service_store import Input, Outcome
from steerable.store import Steer
from steerable.stores.mysql import MySQLStore
from tests.stores.mysql import server


async def _questions(pool: Any) -> tuple[int, int]:
    """The connection's id and its ``Questions`` count, this SHOW excluded."""
    async with pool.acquire() as conn, conn.cursor() as cur:
        await cur.execute("SHOW SESSION STATUS LIKE 'Questions'")
        (_, count), *_ = await cur.fetchall()
        return conn.thread_id(), int(count) - 1


async def _statements(pool: Any, work: Any) -> int:
    thread, before = await _questions(pool)
    await work()
    same, after = await _questions(pool)
    assert same == thread, "the pool changed connections: the count is not one session's"
    return after - before - 1  # the SHOW of the first count


@pytest.mark.parametrize("autocommit", [False, True], ids=["no-autocommit", "autocommit"])
async def test_a_save_and_take_is_one_statement(autocommit: bool) -> None:
    sid = f"mysql-{new_id()}"
    async with server.pool_on(maxsize=1, autocommit=autocommit) as pool:
        store = MySQLStore(pool)
        await store.check_schema()  # what a store object's first call does, once
        at = 0
        for step in range(3):  # nobody steers: each step saves and finds no steer
            batch = [user(f"step {step}"), user(f"tool results {step}")]

            async def step_save(batch: Any = batch, at: int = at) -> None:
                assert await store.save(sid, batch, at=at, take=16) == []

            assert await _statements(pool, step_save) == 1
            at += len(batch)
        await store.steer(sid, Steer("now someone steers"))

        async def steered() -> None:
            assert len(await store.save(sid, [user("more")], at=at, take=16)) == 1

        assert await _statements(pool, steered) == 1  # and taking one costs nothing more

        async def take() -> None:
            await store.take_steers(sid, at=None, limit=16)

        assert await _statements(pool, take) == 1
        assert len(await store.messages(sid)) == 8


async def test_the_other_verbs_are_one_statement_with_autocommit() -> None:
    sid = f"mysql-{new_id()}"
    async with server.pool_on(maxsize=1, autocommit=True) as pool:
        store = MySQLStore(pool)
        # a store object's first call also reads the schema version, once
        assert await _statements(pool, lambda: store.steers(sid)) == 2
        for work in (
            lambda: store.steer(sid, Steer("s")),
            lambda: store.steers(sid),
            lambda: store.messages(sid),
        ):
            assert await _statements(pool, work) == 1


@pytest.mark.parametrize("autocommit", [False, True], ids=["no-autocommit", "autocommit"])
async def test_a_service_step_is_one_statement_steered_or_not(autocommit: bool) -> None:
    sid = f"mysql-{new_id()}"
    async with server.pool_on(maxsize=1, autocommit=autocommit) as pool:
        store = MySQLStore(pool)
        await store.enqueue(sid, Input("send", "go", "p"))
        claim = await store.claim("a", seconds=60, cap=16, session=sid)
        assert claim is not None

        async def unsteered() -> None:
            assert await store.step(claim.lease, [user("go", id="p")], at=0, take=16) == []

        assert await _statements(pool, unsteered) == 1
        await store.enqueue(sid, Input("steer", "now", "s"))

        async def steered() -> None:
            taken = await store.step(claim.lease, [user("tool results")], at=1, take=16)
            assert [m.id for m in taken] == ["s"]

        assert await _statements(pool, steered) == 1


@pytest.mark.parametrize("autocommit", [False, True], ids=["no-autocommit", "autocommit"])
async def test_an_end_with_its_last_save_is_one_statement_more_than_without(
    autocommit: bool,
) -> None:
    # the save the end carries takes the core's lock and inserts, in the end's transaction
    # under its fence; the end's read of the length serves as the save's check, and the
    # messages' events go in the end's one insert of events: as many statements as a final
    # step (one CALL) and an end apart, in one call and one transaction
    async with server.pool_on(maxsize=1, autocommit=autocommit) as pool:
        store = MySQLStore(pool)
        counts = []
        for last, apart in (([], False), ([assistant("a")], False), ([assistant("a")], True)):
            for more in (last, [*last, assistant("b")]) if last else ([],):
                sid = f"mysql-{new_id()}"
                await store.enqueue(sid, Input("send", "go", "p"))
                claim = await store.claim("a", seconds=60, cap=16, session=sid)
                assert claim is not None
                await store.step(claim.lease, [user("go", id="p")], at=0, take=16)

                async def end(claim: Any = claim, more: Any = more, apart: bool = apart) -> None:
                    if apart:
                        await store.step(claim.lease, more, at=1, take=0, final=True)
                        await store.end_turn(claim.lease, Outcome("completed"))
                    else:
                        await store.end_turn(claim.lease, Outcome("completed"), last=more, at=1)

                counts.append(await _statements(pool, end))
                assert len(await store.messages(sid)) == 1 + len(more)
        alone, one, two, step_one, step_two = counts
        assert one == two == alone + 1 == step_one == step_two


@pytest.mark.parametrize("autocommit", [False, True], ids=["no-autocommit", "autocommit"])
async def test_a_claim_with_its_first_step_is_two_statements_more_two_to_take_steers(
    autocommit: bool,
) -> None:
    # the core's lock and the insert of the messages; the take and the read of the steers
    # taken only when steers were offered; whether the prompt is stored is read with the
    # prompt, the step's events go in the claim's insert of events, the turn's counts in
    # its update of the service row
    async with server.pool_on(maxsize=1, autocommit=autocommit) as pool:
        store = MySQLStore(pool)
        counts = []
        for first, steers in ((False, 0), (True, 0), (False, 2), (True, 2)):
            sid = f"mysql-{new_id()}"
            await store.enqueue(sid, Input("send", "go", "p"))
            for n in range(steers):
                await store.enqueue(sid, Input("steer", "and", f"s{n}"))

            async def claim(sid: str = sid, first: bool = first, steers: int = steers) -> None:
                made = await store.claim("a", seconds=60, cap=16, session=sid, first=first)
                assert made is not None
                taken = None if made.taken is None else len(made.taken)
                assert taken == (steers if first else None)

            counts.append(await _statements(pool, claim))
            assert len(await store.messages(sid)) == (1 + steers if first else 0)
        alone, stepping, alone_steered, stepping_steered = counts
        assert alone == alone_steered
        assert stepping == alone + 2
        assert stepping_steered == alone + 4


@pytest.mark.parametrize("autocommit", [False, True], ids=["no-autocommit", "autocommit"])
async def test_the_stop_poll_is_one_statement(autocommit: bool) -> None:
    # a replica without notifications sends it about every 0.2 s while it holds turns
    sid, holder = f"mysql-{new_id()}", f"poller-{new_id()}"
    async with server.pool_on(maxsize=1, autocommit=autocommit) as pool:
        store = MySQLStore(pool)
        await store.enqueue(sid, Input("send", "go", "p"))
        assert await store.claim(holder, seconds=60, cap=16, session=sid) is not None
        await store.stop(sid)
        # without autocommit it is one text, ROLLBACK; SELECT; COMMIT: three to the server
        sent = 1 if autocommit else 3

        async def poll() -> None:
            assert await store.stopping(holder) == [sid]

        assert await _statements(pool, poll) == sent


@pytest.mark.parametrize("autocommit", [False, True], ids=["no-autocommit", "autocommit"])
async def test_a_fork_is_eight_statements_however_long(autocommit: bool) -> None:
    async with server.pool_on(maxsize=1, autocommit=autocommit) as pool:
        store = MySQLStore(pool)
        await store.check_schema()
        for length in (1, 1000):
            old, new = f"mysql-{new_id()}", f"mysql-{new_id()}"
            messages = [user(f"m{i}") if i % 2 == 0 else assistant(f"a{i}") for i in range(length)]
            await store.save(old, messages, at=0)

            async def fork(old: str = old, new: str = new, length: int = length) -> None:
                assert await store.fork(old, new) == length

            # START TRANSACTION, the two locks (three), the check, the copy, the removal of
            # an empty service row, COMMIT
            assert await _statements(pool, fork) == 8
            assert await store.messages(new) == messages
