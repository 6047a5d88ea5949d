"""The cases of :class:`steerable.store.Forkable`: a session started from another's
transcript, up to a message.

``CASES`` join the store contract and ``SERVICE_CASES`` the service contract; each needs
the ``forkable`` ability. What they promise is in ``Forkable.fork``'s docstring: the copy
holds the old transcript through the message, the same at every position; the two never
share a later write; nothing but the transcript comes along; a fork that cannot be is
refused whole.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from contextlib import AsyncExitStack
from typing import Any

import pytest

from steerable.errors import MessageNotFound, SessionExists
from steerable.messages import Message, Text, ToolCall, ToolResult, assistant, new_id, user
from steerable.service_store import Input
from steerable.store import Forkable, Rewritable, Steer, Store
from steerable.testing.abilities import OpenStore, needs
from steerable.testing.service_cases import Both

CASES: list[Callable[..., Coroutine[Any, Any, None]]] = []
"""The store contract's cases of ``fork``, in the order they run."""

SERVICE_CASES: list[Callable[..., Coroutine[Any, Any, None]]] = []
"""The service contract's cases of ``fork``, in the order they run."""


def _case(case: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., Any]:
    CASES.append(case)
    return needs("forkable")(case)


def _service_case(case: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., Any]:
    SERVICE_CASES.append(case)
    return needs("forkable")(case)


def _sid() -> str:
    return f"fork-{new_id()}"


def _forking(store: Store) -> Forkable:
    assert isinstance(store, Forkable), f"{type(store).__name__} has no fork"
    return store


def _conversation() -> list[Message]:
    call = ToolCall("c1", "look", '{"q": "monday"}')
    return [
        user("plan my week"),
        Message("assistant", (call,)),
        Message("user", (ToolResult("c1", "look", "found"),)),
        Message("user", (Text("skip friday"),), steered=True),
        assistant("done: monday"),
        user("and tuesday?"),
        assistant("tuesday too"),
    ]


@_case
async def a_fork_copies_the_transcript_through_the_message(store: Store) -> None:
    """The copy is the old transcript up to and including the message, at the same places."""
    old, new = _sid(), _sid()
    messages = _conversation()
    await store.save(old, messages, at=0)
    assert await _forking(store).fork(old, new, through=messages[4].id) == 5
    assert await store.messages(new) == messages[:5]
    assert await store.messages(old) == messages


@_case
async def a_fork_without_a_message_copies_all_of_it(store: Store) -> None:
    """``through`` None: the whole transcript; an empty one copies nothing."""
    old, new, empty, nowhere = _sid(), _sid(), _sid(), _sid()
    messages = _conversation()
    await store.save(old, messages, at=0)
    assert await _forking(store).fork(old, new) == len(messages)
    assert await store.messages(new) == messages
    assert await _forking(store).fork(empty, nowhere) == 0
    assert await store.messages(nowhere) == []


@_case
async def the_two_sessions_share_no_later_write(store: Store) -> None:
    """A save to the fork never shows in the old session, nor one to the old in the fork."""
    old, new = _sid(), _sid()
    messages = _conversation()
    await store.save(old, messages, at=0)
    await _forking(store).fork(old, new, through=messages[1].id)
    fork_reply = user("the fork goes on")
    await store.save(new, [fork_reply], at=2)
    old_reply = user("the old goes on")
    await store.save(old, [old_reply], at=len(messages))
    assert await store.messages(new) == [*messages[:2], fork_reply]
    assert await store.messages(old) == [*messages, old_reply]


@_case
async def a_fork_through_a_message_it_lacks_is_refused_whole(store: Store) -> None:
    """An unknown ``through`` (one of another session too): MessageNotFound, no session."""
    old, other, new = _sid(), _sid(), _sid()
    messages = _conversation()
    await store.save(old, messages, at=0)
    elsewhere = user("in another session")
    await store.save(other, [elsewhere], at=0)
    for missing in ("no-such-message", elsewhere.id):
        with pytest.raises(MessageNotFound):
            await _forking(store).fork(old, new, through=missing)
    assert await store.messages(new) == []
    assert await _forking(store).fork(old, new, through=messages[0].id) == 1  # still free


@_case
async def a_fork_into_a_session_that_has_anything_is_refused(store: Store) -> None:
    """A target with a transcript or steers: SessionExists, and it is left as it was."""
    old, full, steered = _sid(), _sid(), _sid()
    messages = _conversation()
    await store.save(old, messages, at=0)
    mine = user("mine")
    await store.save(full, [mine], at=0)
    await store.steer(steered, Steer("a steer", "w1"))
    for target in (full, steered):
        with pytest.raises(SessionExists):
            await _forking(store).fork(old, target)
    assert await store.messages(full) == [mine]
    assert [s.id for s in await store.steers(steered)] == ["w1"]
    assert await store.messages(steered) == []


@_case
async def steers_waiting_on_the_old_session_stay_there(store: Store) -> None:
    """The fork takes no steer: they wait for the old session's next step."""
    old, new = _sid(), _sid()
    await store.save(old, _conversation(), at=0)
    await store.steer(old, Steer("for the old one", "w1"))
    await _forking(store).fork(old, new)
    assert await store.steers(new) == []
    assert [s.id for s in await store.steers(old)] == ["w1"]


@_case
async def racing_forks_into_one_session_make_one(store: Store, store_factory: OpenStore) -> None:
    """Forks of two sessions into one new id, at once: one wins, the other is refused."""
    first, second, new = _sid(), _sid(), _sid()
    await store.save(first, _conversation(), at=0)
    await store.save(second, [user("the second")], at=0)

    async def fork(s: Any, source: str) -> str | None:
        try:
            await s.fork(source, new)
        except SessionExists:
            return None
        return source

    async with AsyncExitStack() as stack:
        a, b = [await stack.enter_async_context(store_factory()) for _ in range(2)]
        won = [w for w in await asyncio.gather(fork(a, first), fork(b, second)) if w]
    assert len(won) == 1
    expected = await store.messages(won[0])
    assert await store.messages(new) == expected


@_case
async def a_long_transcript_forks_whole(store: Store) -> None:
    """A thousand messages are copied, all of them, in order."""
    old, new = _sid(), _sid()
    messages = [user(f"m{i}") if i % 2 == 0 else assistant(f"a{i}") for i in range(1000)]
    for start in range(0, 1000, 250):
        await store.save(old, messages[start : start + 250], at=start)
    assert await _forking(store).fork(old, new, through=messages[899].id) == 900
    assert await store.messages(new) == messages[:900]


@_service_case
async def a_fork_copies_no_input_and_refuses_a_session_with_one(store: Both) -> None:
    """The fork has no inputs, turns, events or metadata; a target with an input, or with
    metadata only, is refused."""
    old, new, queued, annotated = _sid(), _sid(), _sid(), _sid()
    await store.save(old, _conversation(), at=0)
    await store.enqueue(old, Input("send", "waits on the old one", "x"))
    await store.set_metadata(old, {"title": "old"})
    await _forking(store).fork(old, new)
    status = await store.status(new)
    assert (status.turn, status.waiting, status.waiting_total, status.metadata) == (
        None,
        [],
        0,
        {},
    )
    assert await store.events(new, after=0, limit=10) == []
    assert (await store.status(old)).waiting_total == 1
    await store.enqueue(queued, Input("send", "mine", "y"))
    await store.set_metadata(annotated, {"title": "taken"})
    for target in (queued, annotated):
        with pytest.raises(SessionExists):
            await _forking(store).fork(old, target)
    assert await store.messages(queued) == [] and await store.messages(annotated) == []


@_service_case
async def a_fork_keeps_each_message_s_stored_time(store: Both) -> None:
    """The copies carry the times their originals were stored at, not the fork's."""
    old, new = _sid(), _sid()
    await store.save(old, _conversation(), at=0)
    await asyncio.sleep(1.1)  # a fork that stamped its own time would differ by this
    await _forking(store).fork(old, new)
    before = [e.at for e in await store.transcript(old, after=-1, limit=100)]
    after = [e.at for e in await store.transcript(new, after=-1, limit=100)]
    assert after == before and None not in after


@_case
async def a_deleted_session_can_be_forked_into_again(store: Store) -> None:
    """Once deleted, a session is free: a fork into it is no longer refused."""
    if not isinstance(store, Rewritable):
        pytest.skip("the store cannot delete a session (it is not Rewritable)")
    old, new = _sid(), _sid()
    await store.save(old, _conversation(), at=0)
    await store.save(new, [user("soon gone")], at=0)
    await store.steer(new, Steer("and a steer", "w1"))
    assert await store.delete(new)
    assert await _forking(store).fork(old, new) == len(await store.messages(old))


@_case
async def a_missing_message_is_named_before_a_taken_session(store: Store) -> None:
    """Both refusals apply: MessageNotFound is the one raised, on every store alike."""
    old, taken = _sid(), _sid()
    await store.save(old, _conversation(), at=0)
    await store.save(taken, [user("mine")], at=0)
    with pytest.raises(MessageNotFound):
        await _forking(store).fork(old, taken, through="no-such-message")
