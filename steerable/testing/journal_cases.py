"""The cases of the tool journal (:class:`steerable.store.Journaling`) and of the tail swap
the orphan repair writes (:class:`steerable.store.Repairable`).

``CASES`` join the store contract; they need the ``journaled`` or the ``repairable``
ability. What they promise is in :mod:`steerable.store`'s docstring: a call is told "new"
to exactly one of the callers that begin it, its first recorded result is the one kept,
and a session's journal is its own; a swap of a tail happens only over the very tail the
caller read, whole or not at all.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from steerable.errors import InvalidMessage, TranscriptConflict
from steerable.messages import Message, Text, ToolCall, ToolResult, assistant, new_id, user
from steerable.store import Forkable, Journaling, Repairable, Rewritable, Steer, Store
from steerable.testing.abilities import OpenStore, needs

CASES: list[Callable[..., Coroutine[Any, Any, None]]] = []
"""The store contract's cases of the journal and of ``replace``, in the order they run."""


def _journal_case(case: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., Any]:
    CASES.append(case)
    return needs("journaled")(case)


def _replace_case(case: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., Any]:
    CASES.append(case)
    return needs("repairable")(case)


def _sid() -> str:
    return f"journal-{new_id()}"


def _journal(store: Store) -> Journaling:
    assert isinstance(store, Journaling), f"{type(store).__name__} keeps no tool journal"
    return store


def _swap(store: Store) -> Repairable:
    assert isinstance(store, Repairable), f"{type(store).__name__} has no replace"
    return store


def _result(key: str, content: str = "paid", *, error: bool = False) -> ToolResult:
    return ToolResult(f"call-{key}", "pay", content, error)


# -- the journal --------------------------------------------------------------------------


@_journal_case
async def a_call_begun_once_is_new_then_started(store: Store) -> None:
    """The first begin of a key is told it is new (absent); every later one, started (None)."""
    sid = _sid()
    assert await _journal(store).begin_calls(sid, ["k1", "k2"]) == {}
    assert await _journal(store).begin_calls(sid, ["k1"]) == {"k1": None}
    assert await _journal(store).begin_calls(sid, ["k2", "k3"]) == {"k2": None}
    assert await _journal(store).begin_calls(sid, []) == {}


@_journal_case
async def an_ended_call_gives_its_result_back_exactly(store: Store) -> None:
    """What ``end_call`` kept, ``begin_calls`` answers, byte for byte."""
    sid = _sid()
    content = '{"z":1,"a":[1, 2],"z":3}\n\U0001d11e \x00'
    result = ToolResult("call_\U0001f4b3", "pay\u0301", content, True)
    await _journal(store).begin_calls(sid, ["k"])
    assert await _journal(store).end_call(sid, "k", result) == result
    assert await _journal(store).begin_calls(sid, ["k", "other"]) == {"k": result}
    assert await _journal(store).begin_calls(sid, ["other"]) == {"other": None}


@_journal_case
async def the_first_result_recorded_is_kept(store: Store) -> None:
    """A second ``end_call`` (a re-run elsewhere) changes nothing and returns the first."""
    sid = _sid()
    first, second = _result("k", "paid once"), _result("k", "paid twice")
    await _journal(store).begin_calls(sid, ["k"])
    assert await _journal(store).end_call(sid, "k", first) == first
    assert await _journal(store).end_call(sid, "k", second) == first
    assert await _journal(store).begin_calls(sid, ["k"]) == {"k": first}


@_journal_case
async def a_result_recorded_without_a_begin_is_kept(store: Store) -> None:
    """``end_call`` of a key never begun records it begun and ended."""
    sid = _sid()
    result = _result("k")
    assert await _journal(store).end_call(sid, "k", result) == result
    assert await _journal(store).begin_calls(sid, ["k"]) == {"k": result}


@_journal_case
async def one_of_many_racing_begins_is_told_the_call_is_new(
    store: Store, store_factory: OpenStore
) -> None:
    """Twenty begins of one key at once, over two store objects: exactly one is new."""
    for _ in range(3):
        sid = _sid()
        async with store_factory() as other:
            answers = await asyncio.gather(
                *(
                    _journal(store if i % 2 else other).begin_calls(sid, ["k", f"own-{i}"])
                    for i in range(20)
                )
            )
        assert sum("k" not in answer for answer in answers) == 1
        assert all(f"own-{i}" not in answer for i, answer in enumerate(answers))


@_journal_case
async def racing_ends_keep_one_result(store: Store, store_factory: OpenStore) -> None:
    """Ten ends of one call at once: every one is answered with the same kept result."""
    sid = _sid()
    await _journal(store).begin_calls(sid, ["k"])
    async with store_factory() as other:
        kept = await asyncio.gather(
            *(
                _journal(store if i % 2 else other).end_call(sid, "k", _result("k", f"run {i}"))
                for i in range(10)
            )
        )
    assert len(set(kept)) == 1
    assert await _journal(store).begin_calls(sid, ["k"]) == {"k": kept[0]}


@_journal_case
async def each_session_has_its_own_journal(store: Store) -> None:
    """One key in two sessions is two calls; a transcript or steer box is not touched."""
    one, two = _sid(), _sid()
    await _journal(store).begin_calls(one, ["k"])
    await _journal(store).end_call(one, "k", _result("k"))
    assert await _journal(store).begin_calls(two, ["k"]) == {}
    assert await store.messages(one) == [] and await store.steers(one) == []


@_journal_case
async def the_journal_outlives_the_store_object(store: Store, store_factory: OpenStore) -> None:
    """A call begun and one ended are known to another store object (a replica)."""
    sid = _sid()
    result = _result("done")
    await _journal(store).begin_calls(sid, ["started", "done"])
    await _journal(store).end_call(sid, "done", result)
    async with store_factory() as other:
        known = await _journal(other).begin_calls(sid, ["started", "done", "fresh"])
    assert known == {"started": None, "done": result}


@_journal_case
async def a_delete_forgets_the_journal(store: Store) -> None:
    """After ``delete`` a key of the session is new again (``rewritable`` stores)."""
    if not isinstance(store, Rewritable):
        pytest.skip("the store cannot delete a session")
    sid = _sid()
    await store.save(sid, [user("hi")], at=0)
    await _journal(store).begin_calls(sid, ["a", "b"])
    await _journal(store).end_call(sid, "a", _result("a"))
    assert await store.delete(sid)
    assert await _journal(store).begin_calls(sid, ["a", "b"]) == {}


@_journal_case
async def a_journal_alone_is_forgotten_by_delete(store: Store) -> None:
    """A session with nothing but journal entries is deleted whole too."""
    if not isinstance(store, Rewritable):
        pytest.skip("the store cannot delete a session")
    sid = _sid()
    await _journal(store).end_call(sid, "a", _result("a"))
    await store.delete(sid)
    assert await _journal(store).begin_calls(sid, ["a"]) == {}


@_journal_case
async def a_fork_does_not_copy_the_journal(store: Store) -> None:
    """The new session's calls are its own (``forkable`` stores)."""
    if not isinstance(store, Forkable):
        pytest.skip("the store cannot fork")
    old, new = _sid(), _sid()
    await store.save(old, [user("hi")], at=0)
    await _journal(store).end_call(old, "k", _result("k"))
    assert await store.fork(old, new) == 1
    assert await _journal(store).begin_calls(new, ["k"]) == {}
    assert await _journal(store).begin_calls(old, ["k"]) == {"k": _result("k")}


@_journal_case
async def a_result_no_store_can_keep_is_refused(store: Store) -> None:
    """A lone surrogate is an :class:`InvalidMessage`; the call stays started, not ended."""
    sid = _sid()
    await _journal(store).begin_calls(sid, ["k"])
    with pytest.raises(InvalidMessage):
        await _journal(store).end_call(sid, "k", _result("k", "bad \ud800"))
    assert await _journal(store).begin_calls(sid, ["k"]) == {"k": None}


# -- replace ------------------------------------------------------------------------------


async def _five(store: Store, sid: str) -> list[Message]:
    call = ToolCall("c1", "look", '{"q":1}')
    messages = [
        user("plan"),
        Message("assistant", (call,)),
        user("an orphan's neighbour"),
        assistant("done"),
        user("more", id=f"steer-{new_id()}"),
    ]
    await store.save(sid, messages, at=0)
    return messages


@_replace_case
async def replace_swaps_the_tail_it_was_shown(store: Store) -> None:
    """The messages from ``at`` on become the new ones, ids reused or new, marks kept."""
    sid = _sid()
    messages = await _five(store, sid)
    results = Message("user", (ToolResult("c1", "look", "unknown", True),), id=new_id())
    steered = Message("user", (Text("and friday"),), id=messages[4].id, steered=True)
    await _swap(store).replace(
        sid, at=2, old=[m.id for m in messages[2:]], messages=[results, *messages[2:4], steered]
    )
    assert await store.messages(sid) == [*messages[:2], results, *messages[2:4], steered]


@_replace_case
async def replace_over_a_tail_that_changed_is_a_conflict(store: Store) -> None:
    """A message appended, or one fewer, or another in its place: refused, nothing written."""
    sid = _sid()
    messages = await _five(store, sid)
    ids = [m.id for m in messages]
    for old in (ids[2:4], [*ids[2:], "later"], [ids[2], "other", *ids[4:]], ids[1:]):
        with pytest.raises(TranscriptConflict):
            await _swap(store).replace(sid, at=2, old=old, messages=[user("x")])
    with pytest.raises(TranscriptConflict):
        await _swap(store).replace(sid, at=9, old=[], messages=[user("x")])
    assert await store.messages(sid) == messages


@_replace_case
async def replace_at_the_end_appends_and_an_empty_one_cuts(store: Store) -> None:
    """``old`` empty at the end is an append; ``messages`` empty is a cut of the tail."""
    sid = _sid()
    messages = await _five(store, sid)
    last = assistant("six")
    await _swap(store).replace(sid, at=5, old=[], messages=[last])
    await _swap(store).replace(sid, at=3, old=[m.id for m in [*messages[3:], last]], messages=[])
    assert await store.messages(sid) == messages[:3]
    await store.save(sid, [assistant("after")], at=3)  # saves go on at the new length
    with pytest.raises(TranscriptConflict):
        await store.save(sid, [assistant("stale")], at=6)


@_replace_case
async def replace_refuses_an_id_of_a_message_it_keeps(store: Store) -> None:
    """A new message may not take the id of one before ``at``, nor two share one."""
    sid = _sid()
    messages = await _five(store, sid)
    old = [m.id for m in messages[3:]]
    for new in ([user("x", id=messages[0].id)], [user("x", id="twin"), user("y", id="twin")]):
        with pytest.raises(InvalidMessage):
            await _swap(store).replace(sid, at=3, old=old, messages=new)
    assert await store.messages(sid) == messages


@_replace_case
async def racing_replaces_of_one_tail_let_one_win(store: Store, store_factory: OpenStore) -> None:
    """Two swaps of the same tail, and a save at its end: exactly one of the three wins."""
    for _ in range(5):
        sid = _sid()
        messages = await _five(store, sid)
        old = [m.id for m in messages[2:]]
        mine, theirs = [user("mine")], [user("theirs")]
        async with store_factory() as other:
            outcomes = await asyncio.gather(
                _swap(store).replace(sid, at=2, old=old, messages=mine),
                _swap(other).replace(sid, at=2, old=old, messages=theirs),
                other.save(sid, [assistant("six")], at=5),
                return_exceptions=True,
            )
        won = [o for o in outcomes if not isinstance(o, TranscriptConflict)]
        assert len(won) == 1, outcomes
        stored = await store.messages(sid)
        assert stored in ([*messages[:2], *mine], [*messages[:2], *theirs], [*messages, stored[-1]])
        assert [m.text for m in stored[5:]] in ([], ["six"])


@_replace_case
async def replace_leaves_the_steer_box_alone(store: Store) -> None:
    """Waiting steers stay waiting; a steer id taken before stays seen."""
    sid = _sid()
    messages = await _five(store, sid)
    await store.steer(sid, Steer("wait", "w1"))
    await _swap(store).replace(sid, at=4, old=[messages[4].id], messages=[])
    assert [s.id for s in await store.steers(sid)] == ["w1"]
    await store.steer(sid, Steer("again", "w1"))
    assert len(await store.steers(sid)) == 1
