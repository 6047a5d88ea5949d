"""The cases of :class:`steerable.store.Rewritable`: cutting a transcript, deleting a session.

``CASES`` join the store contract and ``SERVICE_CASES`` the service contract; each needs
the ``rewritable`` ability. What they promise is in :mod:`steerable.store`'s docstring: a
cut removes the tail and only the tail, checked against the length the caller saw; a
delete forgets the session but never winds its epoch or its event ids back; and neither
touches a session a service turn is running on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from steerable.errors import Fenced, SessionBusy, TranscriptConflict, UsageError
from steerable.messages import Message, Text, assistant, new_id, user
from steerable.service_store import Input, Outcome
from steerable.store import CheckedStore, Rewritable, Steer, Store
from steerable.testing.abilities import OpenStore, needs
from steerable.testing.service_cases import LONG, Both

CASES: list[Callable[..., Coroutine[Any, Any, None]]] = []
"""The store contract's cases of the two verbs, in the order they run."""

SERVICE_CASES: list[Callable[..., Coroutine[Any, Any, None]]] = []
"""The service contract's cases of the two verbs, in the order they run."""


def _case(case: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., Any]:
    CASES.append(case)
    return needs("rewritable")(case)


def _service_case(case: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., Any]:
    SERVICE_CASES.append(case)
    return needs("rewritable")(case)


def _sid() -> str:
    return f"rewrite-{new_id()}"


def _edit(store: Store) -> Rewritable:
    assert isinstance(store, Rewritable), f"{type(store).__name__} has no truncate/delete"
    return store


async def _five(store: Store, sid: str) -> list[Message]:
    messages = [user("one"), assistant("two"), user("three"), assistant("four"), user("five")]
    await store.save(sid, messages, at=0)
    return messages


# -- truncate -------------------------------------------------------------------------------


@_case
async def a_truncate_removes_the_tail_and_returns_it(store: Store) -> None:
    """``truncate(at=n)`` removes positions n.. and returns them; the head is untouched."""
    sid = _sid()
    messages = await _five(store, sid)
    removed = await _edit(store).truncate(sid, at=3)
    assert removed == messages[3:]
    assert await store.messages(sid) == messages[:3]
    assert await _edit(store).truncate(sid, at=3) == []
    assert await _edit(store).truncate(sid, at=10) == []
    assert await store.messages(sid) == messages[:3]


@_case
async def a_cut_position_is_saved_at_again_with_the_removed_ids(store: Store) -> None:
    """After a cut, a save at the cut position works, even with the ids it removed."""
    sid = _sid()
    messages = await _five(store, sid)
    await _edit(store).truncate(sid, at=3)
    with pytest.raises(TranscriptConflict):
        await store.save(sid, [user("late")], at=5)
    again = Message("assistant", (Text("four, corrected"),), id=messages[3].id)
    await store.save(sid, [again], at=3)
    assert await store.messages(sid) == [*messages[:3], again]


@_case
async def a_truncate_checks_the_length_it_was_told(store: Store) -> None:
    """With ``length``, a store holding another count refuses and changes nothing."""
    sid = _sid()
    messages = await _five(store, sid)
    with pytest.raises(TranscriptConflict) as raised:
        await _edit(store).truncate(sid, at=4, length=4)
    assert (raised.value.expected, raised.value.stored) == (4, 5)
    assert await store.messages(sid) == messages
    assert await _edit(store).truncate(sid, at=4, length=5) == messages[4:]
    assert await _edit(store).truncate(sid, at=0, length=4) == messages[:4]
    assert await store.messages(sid) == []
    assert await _edit(store).truncate(sid, at=0, length=0) == []


@_case
async def a_truncate_racing_a_save_lets_exactly_one_win(
    store: Store, store_factory: OpenStore
) -> None:
    """ "Remove the last" and "append" at one length: one of them wins, whole, each time."""
    for _ in range(5):
        sid = _sid()
        messages = await _five(store, sid)
        async with store_factory() as other:
            results = await asyncio.gather(
                _edit(store).truncate(sid, at=4, length=5),
                other.save(sid, [assistant("six")], at=5),
                return_exceptions=True,
            )
        stored = await store.messages(sid)
        if isinstance(results[0], TranscriptConflict):
            assert results[1] == [] and [m.text for m in stored[5:]] == ["six"]
            assert stored[:5] == messages
        else:
            assert results[0] == messages[4:] and isinstance(results[1], TranscriptConflict)
            assert stored == messages[:4]


@_case
async def a_truncate_leaves_the_steer_box_alone(store: Store) -> None:
    """Waiting steers stay waiting; a steer id seen before is still seen after a cut."""
    sid = _sid()
    await store.save(sid, [user("go")], at=0)
    await store.steer(sid, Steer("taken", "s1"))
    await store.take_steers(sid, at=None, limit=1)
    await store.steer(sid, Steer("waiting", "s2"))
    await _edit(store).truncate(sid, at=1)
    assert [m.text for m in await store.messages(sid)] == ["go"]
    await store.steer(sid, Steer("taken, again", "s1"))
    assert [s.id for s in await store.steers(sid)] == ["s2"]


# -- delete ---------------------------------------------------------------------------------


@_case
async def a_delete_forgets_the_transcript_and_the_steer_box(
    store: Store, store_factory: OpenStore
) -> None:
    """After a delete the session is new: empty, no steers, a seen steer id is new again."""
    sid, other = _sid(), _sid()
    await _five(store, sid)
    await store.save(other, [user("kept")], at=0)
    await store.steer(sid, Steer("taken", "s1"))
    await store.take_steers(sid, at=None, limit=1)
    await store.steer(sid, Steer("waiting", "s2"))
    assert await _edit(store).delete(sid) is True
    async with store_factory() as second:
        assert await second.messages(sid) == []
        assert await second.steers(sid) == []
    assert await _edit(store).delete(sid) is False
    await store.steer(sid, Steer("new again", "s1"))
    assert [s.text for s in await store.steers(sid)] == ["new again"]
    await store.save(sid, [user("a fresh start")], at=0)
    assert [m.text for m in await store.messages(sid)] == ["a fresh start"]
    assert [m.text for m in await store.messages(other)] == ["kept"]
    assert await _edit(store).delete(_sid()) is False


@_case
async def the_front_door_checks_truncate_and_delete(store: Store) -> None:
    """Bad arguments to the two verbs are usage errors that reach no store."""
    checked = CheckedStore(store)
    sid = _sid()
    await store.save(sid, [user("kept")], at=0)
    for bad in (-1, None, 1.0, True):
        with pytest.raises(UsageError):
            await checked.truncate(sid, at=bad)  # type: ignore[arg-type]
    with pytest.raises(UsageError):
        await checked.truncate(sid, at=0, length=-1)
    with pytest.raises(UsageError):
        await checked.delete("")
    assert [m.text for m in await store.messages(sid)] == ["kept"]


# -- under the service ----------------------------------------------------------------------


async def _running(store: Both, sid: str) -> Any:
    await store.enqueue(sid, Input("send", "go", "t"))
    claim = await store.claim("a", seconds=LONG, cap=16, session=sid)
    assert claim is not None
    prompt = claim.prompt.message(steered=False)
    await store.step(claim.lease, [prompt], at=0, take=16)
    return claim


@_service_case
async def a_running_turn_s_session_cannot_be_cut_or_deleted(store: Both) -> None:
    """While a turn runs, both verbs are :class:`SessionBusy` and change nothing."""
    sid = _sid()
    claim = await _running(store, sid)
    await store.step(claim.lease, [assistant("working")], at=1, take=0)
    await store.enqueue(sid, Input("send", "next", "n"))
    for attempt in (_edit(store).truncate(sid, at=1), _edit(store).delete(sid)):
        with pytest.raises(SessionBusy) as raised:
            await attempt
        assert raised.value.turn == "t"
    assert [m.text for m in await store.messages(sid)] == ["go", "working"]
    status = await store.status(sid)
    assert status.turn is not None and status.turn.id == "t" and status.queued == 1
    await store.end_turn(claim.lease, Outcome("completed", "working"))
    assert [m.text for m in await _edit(store).truncate(sid, at=1, length=2)] == ["working"]


@_service_case
async def a_delete_forgets_inputs_turns_and_events_but_not_the_epoch(store: Both) -> None:
    """A deleted session starts over, its epoch and event ids going on from where they were."""
    sid = _sid()
    claim = await _running(store, sid)
    await store.step(claim.lease, [assistant("done")], at=1, take=0)
    await store.end_turn(claim.lease, Outcome("completed", "done"))
    await store.enqueue(sid, Input("send", "queued", "q"))
    last = (await store.events(sid, after=0, limit=1000))[-1].id
    assert await _edit(store).delete(sid) is True
    status = await store.status(sid)
    assert (status.turn, status.waiting, status.queued) == (None, [], 0)
    assert await store.input(sid, "t") is None and await store.turn(sid, "t") is None
    assert await store.input(sid, "q") is None
    assert await store.events(sid, after=0, limit=1000) == []
    assert await store.transcript(sid, after=-1, limit=100) == []
    assert await store.sessions(prefix=sid, after=None, limit=10) == []
    assert await store.claim("b", seconds=LONG, cap=16, session=sid) is None
    with pytest.raises(Fenced):
        await store.step(claim.lease, [assistant("stale")], at=0, take=0)
    accepted = await store.enqueue(sid, Input("send", "again", "t"))
    assert not accepted.duplicate and accepted.ahead == 0
    fresh = await store.claim("b", seconds=LONG, cap=16, session=sid)
    assert fresh is not None and fresh.turn == "t" and fresh.messages == []
    assert fresh.start == 0 and fresh.lease.epoch > claim.lease.epoch
    events = await store.events(sid, after=0, limit=1000)
    assert events and min(e.id for e in events) > last


@_service_case
async def a_delete_racing_a_claim_lets_exactly_one_win(
    store: Both, store_factory: OpenStore
) -> None:
    """A claim and a delete at once: the turn runs (delete busy) or nothing is left to claim."""
    for _ in range(5):
        sid = _sid()
        await store.enqueue(sid, Input("send", "go", "t"))
        async with store_factory() as other:
            assert isinstance(other, Rewritable)
            claimed, deleted = await asyncio.gather(
                store.claim("a", seconds=LONG, cap=16, session=sid),
                other.delete(sid),
                return_exceptions=True,
            )
        if isinstance(deleted, SessionBusy):
            assert claimed is not None and not isinstance(claimed, BaseException)
            assert (await store.status(sid)).turn is not None
        else:
            assert deleted is True and claimed is None
            status = await store.status(sid)
            assert (status.turn, status.waiting, status.queued) == (None, [], 0)
