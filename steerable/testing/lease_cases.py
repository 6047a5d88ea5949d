"""The service store contract's cases for ``renew_many``: many leases renewed in one call.

They join :data:`steerable.testing.service_cases.SERVICE_CASES` (so every store that runs
the service contract runs them) and follow its rules: fresh session ids, leases that must
expire last a fraction of a second.
"""

from __future__ import annotations

import asyncio

from steerable.service_store import Claim, Outcome, Renewal
from steerable.testing.service_cases import (
    LONG,
    SHORT,
    WAIT,
    Both,
    _case,
    _claimed,
    _first_step,
    _send,
    _sid,
)

MANY = 5


async def _running(
    store: Both, count: int, *, holder: str = "a", seconds: float = LONG
) -> list[Claim]:
    """``count`` sessions, each with a turn claimed by ``holder``."""
    claims = []
    for _ in range(count):
        sid = _sid()
        await store.enqueue(sid, _send("go"))
        claims.append(await _claimed(store, sid, holder=holder, seconds=seconds))
    return claims


def _renewed(answer: Renewal | None) -> Renewal:
    assert answer is not None, "a live lease was refused"
    return answer


@_case
async def renew_many_renews_each_lease_in_the_order_given(store: Both) -> None:
    """Every lease renewed, answered in the order given (not the sessions' order); none of
    the sessions can be claimed after the first expiry."""
    claims = await _running(store, MANY, seconds=SHORT)
    claims.reverse()  # ids sort the other way: the answers follow the leases, not the ids
    answers = await store.renew_many([c.lease for c in claims], seconds=LONG)
    assert len(answers) == MANY
    for claim, answer in zip(claims, answers, strict=True):
        renewal = _renewed(answer)
        assert renewal.lease.session == claim.lease.session
        assert (renewal.lease.holder, renewal.lease.epoch) == ("a", claim.lease.epoch)
        assert renewal.lease.expires_at > claim.lease.expires_at
        assert not renewal.stop_requested
    await asyncio.sleep(WAIT)
    for claim in claims:
        assert await store.claim("b", seconds=LONG, cap=16, session=claim.lease.session) is None


@_case
async def a_stale_lease_among_many_is_refused_alone(store: Both) -> None:
    """A lease another replica took over and one whose turn ended are None in their places;
    the leases around them renew, and the stale ones' sessions are left as they were."""
    live = await _running(store, 2)
    [taken] = await _running(store, 1, seconds=SHORT)
    [ended] = await _running(store, 1)
    await store.end_turn(ended.lease, Outcome("completed", "done"))
    await asyncio.sleep(WAIT)
    sid = taken.lease.session
    new = await _claimed(store, sid, holder="b")
    events = await store.events(sid, after=0, limit=1000)
    leases = [live[0].lease, taken.lease, ended.lease, live[1].lease]
    answers = await store.renew_many(leases, seconds=LONG)
    assert [a is not None for a in answers] == [True, False, False, True]
    assert await store.events(sid, after=0, limit=1000) == events
    status = await store.status(sid)
    assert status.turn is not None and (status.turn.holder, status.turn.epoch) == ("b", 2)
    assert await _first_step(store, new) == [], "the new holder writes on"
    assert (await store.status(ended.lease.session)).turn is None


@_case
async def renew_many_tells_each_lease_whether_its_turn_was_asked_to_stop(store: Both) -> None:
    """A stop asked for one turn is reported with its lease only."""
    claims = await _running(store, 3)
    assert await store.stop(claims[1].lease.session) == claims[1].turn
    answers = await store.renew_many([c.lease for c in claims], seconds=LONG)
    assert [_renewed(a).stop_requested for a in answers] == [False, True, False]


@_case
async def an_expired_lease_nobody_claimed_renews_among_many(store: Both) -> None:
    """Fencing is by epoch: a lease that expired unclaimed renews, as with ``renew``."""
    [expired] = await _running(store, 1, seconds=SHORT)
    [live] = await _running(store, 1)
    await asyncio.sleep(WAIT)
    answers = await store.renew_many([expired.lease, live.lease], seconds=LONG)
    assert all(a is not None for a in answers)
    sid = expired.lease.session
    assert await store.claim("b", seconds=LONG, cap=16, session=sid) is None
    assert await _first_step(store, expired) == [], "the holder writes on"


@_case
async def renew_many_of_no_lease_is_an_empty_answer(store: Both) -> None:
    """``[]`` renews nothing and answers ``[]`` (without reaching the database: the
    Postgres store's own tests count that on the wire)."""
    assert await store.renew_many([], seconds=LONG) == []


@_case
async def a_session_named_twice_is_judged_for_each_lease(store: Both) -> None:
    """The same lease twice is renewed twice; of two epochs of one session (the same
    holder's old lease and its new one), only the current one renews."""
    [old] = await _running(store, 1, seconds=SHORT)
    await asyncio.sleep(WAIT)
    new = await _claimed(store, old.lease.session, holder="a")
    assert new.lease.epoch == old.lease.epoch + 1
    answers = await store.renew_many([new.lease, old.lease, new.lease], seconds=LONG)
    first, stale, again = answers
    assert stale is None
    assert _renewed(first).lease.epoch == _renewed(again).lease.epoch == new.lease.epoch
