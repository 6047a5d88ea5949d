"""The steers mark of schema step 8: a save skips the steers table only when none waits.

The mark (``steerable_sessions.steers``) is set by a trigger before every insert into the
steers table and cleared only by a save whose take found fewer steers than it could take;
the service's step takes no more steers than its turn was offered and did not take. Each
test here ends with a save or a step that must take a steer, or must not: a mark left
FALSE while a steer waits would lose it (until some other steer came), a bound too low
would leave an offered steer behind. The migration of rows made before step 8 is
test_migrations.py's.
"""

from __future__ import annotations

from steerable.errors import TranscriptConflict
from steerable.messages import assistant, new_id, user
from steerable.service_store import Input, Outcome
from steerable.store import Steer
from steerable.stores.mysql import MySQLStore
from tests.stores.mysql import server


def _sid() -> str:
    return f"mark-{new_id()}"


async def _mark(session: str) -> bool | None:
    """The session's steers mark; None when it has no lock row."""
    rows = await server.query(
        "SELECT steers FROM steerable_sessions WHERE session = %s", (session,)
    )
    return None if not rows else bool(rows[0][0])


async def _take(store: MySQLStore, session: str, take: int = 16) -> list[str]:
    """Save one message at the end, taking up to ``take`` steers; the ids taken."""
    at = len(await store.messages(session))
    taken = await store.save(session, [user(f"m{at}")], at=at, take=take)
    return [m.id for m in taken]


async def test_a_save_that_takes_every_waiting_steer_clears_the_mark(store: MySQLStore) -> None:
    sid = _sid()
    assert await _take(store, sid) == []
    assert await _mark(sid) is False
    await store.steer(sid, Steer("s", "s1"))
    assert await _mark(sid) is True
    assert await _take(store, sid) == ["s1"]
    assert await _mark(sid) is False
    await store.steer(sid, Steer("t", "t1"))  # after the mark was cleared: set again
    assert await _take(store, sid) == ["t1"]
    assert await _take(store, sid) == []


async def test_a_take_that_fills_its_limit_leaves_the_mark(store: MySQLStore) -> None:
    sid = _sid()
    assert await _take(store, sid) == []
    await store.steer(sid, Steer("a", "a1"))
    await store.steer(sid, Steer("b", "b1"))
    assert await _take(store, sid, take=1) == ["a1"]
    assert await _mark(sid) is True  # b1 still waits
    assert await _take(store, sid, take=1) == ["b1"]
    assert await _mark(sid) is True  # it cannot tell that none is left
    assert await _take(store, sid, take=1) == []
    assert await _mark(sid) is False


async def test_a_save_without_a_take_leaves_the_mark(store: MySQLStore) -> None:
    sid = _sid()
    assert await _take(store, sid) == []
    await store.steer(sid, Steer("s", "s1"))
    assert await _take(store, sid, take=0) == []
    assert await _mark(sid) is True
    assert await _take(store, sid) == ["s1"]


async def test_a_steer_left_before_the_session_s_first_save_is_taken(store: MySQLStore) -> None:
    sid = _sid()
    await store.steer(sid, Steer("early", "e1"))  # the trigger makes the lock row, marked
    assert await _mark(sid) is True
    assert await _take(store, sid) == ["e1"]
    texts = [m.text for m in await store.messages(sid)]
    assert texts == ["m0", "early"]


async def test_a_seen_steer_id_sets_the_mark_but_is_not_taken_again(store: MySQLStore) -> None:
    sid = _sid()
    await store.steer(sid, Steer("s", "s1"))
    assert await _take(store, sid) == ["s1"]
    await store.steer(sid, Steer("again", "s1"))  # ignored, but the trigger ran
    assert await _mark(sid) is True
    assert await _take(store, sid) == []
    assert await _mark(sid) is False


async def test_a_refused_save_keeps_its_steers_waiting_and_the_mark(store: MySQLStore) -> None:
    sid = _sid()
    assert await _take(store, sid) == []
    await store.steer(sid, Steer("s", "s1"))
    try:
        await store.save(sid, [user("late")], at=0, take=16)
    except TranscriptConflict:
        pass
    else:  # pragma: no cover
        raise AssertionError("a save at a stale position was stored")
    assert await _mark(sid) is True
    assert [s.id for s in await store.steers(sid)] == ["s1"]
    assert await _take(store, sid) == ["s1"]


async def test_steers_left_around_the_rewrite_verbs_are_taken(store: MySQLStore) -> None:
    sid, fork = _sid(), _sid()
    await store.save(sid, [user("a", id="a"), user("b", id="b")], at=0, take=16)
    assert await _mark(sid) is False
    # a cut, a tail swap: the steer waits through them
    await store.steer(sid, Steer("s", "s1"))
    await store.truncate(sid, at=1)
    await store.replace(sid, at=1, old=[], messages=[user("c", id="c")])
    assert await _take(store, sid) == ["s1"]
    # a fork: the new session's rows are made by the fork, its steers by steer()
    assert await store.fork(sid, fork) == 4  # a, c, m2 and s1
    assert await _mark(fork) is True  # made by the fork: the column's default
    assert await _take(store, fork) == []
    await store.steer(fork, Steer("f", "f1"))
    assert await _take(store, fork) == ["f1"]
    # a delete forgets the steers; one left after it waits in the new box
    await store.steer(sid, Steer("gone", "g1"))
    assert await store.delete(sid)
    assert await store.steers(sid) == []
    await store.steer(sid, Steer("new", "n1"))
    assert await store.save(sid, [user("x")], at=0, take=16) != []
    assert [m.text for m in await store.messages(sid)] == ["x", "new"]


async def test_a_step_takes_what_its_turn_was_offered_and_not_taken(store: MySQLStore) -> None:
    sid = _sid()
    await store.enqueue(sid, Input("send", "go", "p"))
    await store.enqueue(sid, Input("steer", "before", "s0"))  # offered to p while it waits
    claim = await store.claim("r", seconds=60, cap=16, session=sid)
    assert claim is not None
    taken = await store.step(claim.lease, [user("go", id="p")], at=0, take=16)
    assert [m.id for m in taken] == ["s0"]
    # offered while it runs, then cancelled: counted still, taken never
    await store.enqueue(sid, Input("steer", "cancelled", "s1"))
    assert await store.cancel(sid, "s1") is not None
    assert await store.step(claim.lease, [assistant("a1", id="a1")], at=2, take=16) == []
    await store.enqueue(sid, Input("steer", "after", "s2"))
    await store.enqueue(sid, Input("steer", "and", "s3"))
    taken = await store.step(claim.lease, [assistant("a2", id="a2")], at=3, take=1)
    assert [m.id for m in taken] == ["s2"]
    taken = await store.step(claim.lease, [assistant("a3", id="a3")], at=5, take=16)
    assert [m.id for m in taken] == ["s3"]
    assert await store.step(claim.lease, [assistant("a4", id="a4")], at=7, take=16) == []
    await store.end_turn(claim.lease, Outcome("completed", "a4"))
    ids = [m.id for m in await store.messages(sid)]
    assert ids == ["p", "s0", "a1", "a2", "s2", "a3", "s3", "a4"]
