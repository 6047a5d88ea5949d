"""Session and the front door: what a session learns after a failed save or take, fresh
sessions that do not match the store, and arguments checked once."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from steerable.errors import StoreUnavailable, TranscriptConflict, UsageError
from steerable.messages import Message, assistant, user
from steerable.session import Session, open_session
from steerable.store import CheckedStore, Steer, Store
from steerable.stores.memory import MemoryStore


async def test_after_a_conflict_the_session_learns_the_stored_length_and_saves_again() -> None:
    store = MemoryStore()
    mine, other = open_session("s", store), open_session("s", store)
    prompt, theirs = user("prompt"), assistant("from another writer")
    await mine.save([prompt])
    await other.save([prompt, theirs])  # another writer extends what mine last saw
    with pytest.raises(TranscriptConflict):
        await mine.save([prompt, assistant("mine")])
    step = [prompt, theirs, user("a tool result")]
    assert await mine.save(step) == []
    assert await store.messages("s") == step
    assert mine.stored == 3


class _AnswerLost:
    """A store whose next save commits and then loses its answer, as a cut line does."""

    def __init__(self, inner: MemoryStore) -> None:
        self.inner = inner
        self.lose_next = False

    def _answer(self) -> None:
        if self.lose_next:
            self.lose_next = False
            raise StoreUnavailable("the line was cut as the store answered")

    async def messages(self, session: str) -> list[Message]:
        return await self.inner.messages(session)

    async def save(
        self, session: str, messages: Sequence[Message], *, at: int, take: int = 0
    ) -> list[Message]:
        taken = await self.inner.save(session, messages, at=at, take=take)
        self._answer()
        return taken

    async def steer(self, session: str, steer: Steer) -> None:
        await self.inner.steer(session, steer)

    async def take_steers(self, session: str, *, at: int | None, limit: int) -> list[Message]:
        taken = await self.inner.take_steers(session, at=at, limit=limit)
        self._answer()
        return taken

    async def steers(self, session: str) -> list[Steer]:
        return await self.inner.steers(session)


async def test_after_a_save_whose_answer_was_lost_the_next_save_writes_only_what_is_new() -> None:
    store = _AnswerLost(MemoryStore())
    session = open_session("s", store)
    first = [user("prompt"), assistant("calling")]
    await session.save(first)
    store.lose_next = True
    step = [*first, user("tool result")]
    with pytest.raises(StoreUnavailable):
        await session.save(step)  # committed, though the session never heard
    assert session.stored is None
    after = [*step, assistant("answer")]
    await session.save(after)
    assert await store.messages("s") == after


async def test_after_a_take_whose_answer_was_lost_the_session_learns_the_stored_length() -> None:
    store = _AnswerLost(MemoryStore())
    session = open_session("s", store)
    prompt = user("prompt")
    await session.save([prompt])
    steer = await session.steer("shorter, please")
    store.lose_next = True
    with pytest.raises(StoreUnavailable):
        await session.take_steers()  # taken and recorded, though the session never heard
    assert session.stored is None
    after = [prompt, steer.message(), assistant("short")]
    assert await session.save(after) == []
    assert await store.messages("s") == after


async def test_a_fresh_session_with_other_ids_than_the_stored_ones_is_a_conflict() -> None:
    store = MemoryStore()
    stored = [user("a"), assistant("b")]
    await store.save("s", stored, at=0)
    longer = [user("a"), assistant("b"), user("c")]  # the same texts, other ids, and longer
    with pytest.raises(TranscriptConflict):
        await open_session("s", store).save(longer)
    with pytest.raises(TranscriptConflict):
        await open_session("s", store).save([stored[0], assistant("b"), user("c")])
    assert await store.messages("s") == stored
    await open_session("s", store).save([*stored, user("c")])  # the stored ids: it extends
    assert len(await store.messages("s")) == 3


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda s: s.save([user("x")], take=-1), "take"),
        (lambda s: s.save([user("x")], take=True), "take"),
        (lambda s: s.save(["not a message"]), "Message"),
        (lambda s: s.save("a string"), "sequence of Message"),
        (lambda s: s.take_steers(limit=1.5), "limit"),
        (lambda s: s.steer(42), "text"),
        (lambda s: s.steer("x", id=""), "steer id"),
    ],
)
async def test_a_session_refuses_bad_arguments_before_the_store_sees_them(
    call: Any, match: str
) -> None:
    store = MemoryStore()
    with pytest.raises(UsageError, match=match):
        await call(Session("s", store))
    assert await store.messages("s") == [] and await store.steers("s") == []


def _numbers() -> Iterator[int]:
    yield 1


@pytest.mark.parametrize(
    ("transcript", "match"),
    [
        ({"a": 1}, "sequence of Message, not dict"),
        (_numbers(), "sequence of Message, not generator"),
        (42, "sequence of Message, not int"),
        ("a string", "sequence of Message, not str"),
        (None, "sequence of Message, not NoneType"),
    ],
)
async def test_a_session_that_knows_the_stored_length_refuses_a_transcript_that_is_no_sequence(
    transcript: Any, match: str
) -> None:
    store = MemoryStore()
    session = Session("s", store)
    await session.save([user("prompt")])
    assert session.stored == 1  # the next save checks only what is new: the slice
    with pytest.raises(UsageError, match=match):
        await session.save(transcript)
    bad: Any = [user("prompt"), "not a message"]
    with pytest.raises(UsageError, match="Message objects, not str"):
        await session.save(bad)
    assert len(await store.messages("s")) == 1


def test_a_session_and_the_front_door_need_a_store() -> None:
    bad: Any = "sessions.db"
    with pytest.raises(UsageError, match="Store"):
        Session("s", bad)
    with pytest.raises(UsageError, match="Store"):
        CheckedStore(bad)
    inner = MemoryStore()
    checked: Store = CheckedStore(CheckedStore(inner))
    assert isinstance(checked, Store)
    assert repr(checked) == f"CheckedStore({inner!r})"  # wrapped once


async def test_the_front_door_refuses_a_save_at_none() -> None:
    bad: Any = None
    with pytest.raises(UsageError, match="`at`"):
        await CheckedStore(MemoryStore()).save("s", [user("x")], at=bad)


@pytest.mark.parametrize("limit", [-1, 1.5, True])
async def test_the_front_door_names_a_bad_limit_of_a_take(limit: Any) -> None:
    with pytest.raises(UsageError, match=r"^`limit` is an int"):
        await CheckedStore(MemoryStore()).take_steers("s", at=None, limit=limit)


async def test_a_session_forks_at_a_message_and_a_run_goes_on_from_there() -> None:
    from steerable import MessageNotFound, Runner, ScriptedModel, SessionExists, Spec

    store = MemoryStore()
    session = open_session("trip", store)
    first = await Runner.run(Spec(session=session), "plan monday", ScriptedModel(["monday: done"]))
    await Runner.run(Spec(session=session), "and tuesday", ScriptedModel(["tuesday: done"]))
    stored = await store.messages("trip")
    answer = first.transcript[-1]
    forked = await session.fork("trip-b", at=answer.id)
    assert forked.id == "trip-b" and forked.stored == 2
    again = await Runner.run(
        Spec(session=forked), [*stored[:2], user("friday instead")], ScriptedModel(["friday"])
    )
    assert [m.readable for m in again.transcript] == [
        "plan monday",
        "monday: done",
        "friday instead",
        "friday",
    ]
    assert await store.messages("trip") == stored  # the old session is untouched
    with pytest.raises(SessionExists):
        await session.fork("trip-b")
    with pytest.raises(MessageNotFound):
        await session.fork("trip-c", at="no-such-message")
    with pytest.raises(UsageError):
        await session.fork("trip")


async def test_a_store_that_cannot_fork_is_told_plainly() -> None:
    class Plain:  # a Store with no fork
        async def messages(self, session: str) -> list[Message]:
            return []

        async def save(
            self, session: str, messages: Sequence[Message], *, at: int, take: int = 0
        ) -> list[Message]:
            return []

        async def take_steers(self, session: str, *, at: int | None, limit: int) -> list[Message]:
            return []

        async def steer(self, session: str, steer: Steer) -> None:
            return None

        async def steers(self, session: str) -> list[Steer]:
            return []

    with pytest.raises(UsageError, match="cannot fork"):
        await Session("s", Plain()).fork("t")
