"""Session and the front door: what a session learns after a failed save, fresh sessions
that do not match the store, arguments checked once, and the SQLite store's options."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from steerable.errors import StoreUnavailable, TranscriptConflict, UsageError
from steerable.messages import Message, assistant, user
from steerable.session import Session, open_session
from steerable.store import CheckedStore, Steer, Store
from steerable.stores.memory import MemoryStore
from steerable.stores.sqlite import SQLiteStore


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

    async def messages(self, session: str) -> list[Message]:
        return await self.inner.messages(session)

    async def save(
        self, session: str, messages: Sequence[Message], *, at: int, take: int = 0
    ) -> list[Message]:
        taken = await self.inner.save(session, messages, at=at, take=take)
        if self.lose_next:
            self.lose_next = False
            raise StoreUnavailable("the line was cut as the store answered")
        return taken

    async def steer(self, session: str, steer: Steer) -> None:
        await self.inner.steer(session, steer)

    async def take_steers(self, session: str, *, at: int | None, limit: int) -> list[Message]:
        return await self.inner.take_steers(session, at=at, limit=limit)

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


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"path": 42}, "file path"),
        ({"path": "x.db", "synchronous": "OFF"}, "synchronous"),
        ({"path": "x.db", "synchronous": "FULL; DROP TABLE x"}, "synchronous"),
        ({"path": "x.db", "busy_timeout": "30"}, "busy_timeout"),
        ({"path": "x.db", "busy_timeout": -1}, "busy_timeout"),
    ],
)
def test_sqlite_store_options_are_usage_errors_never_type_errors(
    kwargs: dict[str, Any], match: str
) -> None:
    with pytest.raises(UsageError, match=match):
        SQLiteStore(**kwargs)


@pytest.mark.parametrize(("mode", "level"), [("NORMAL", 1), ("FULL", 2)])
async def test_sqlite_synchronous_is_really_set_on_the_store_connection(
    tmp_path: Path, mode: Any, level: int
) -> None:
    async with SQLiteStore(tmp_path / "s.db", synchronous=mode) as store:
        await store.save("s", [user("x")], at=0)
        # PRAGMA synchronous belongs to a connection: read it back from the store's own
        got = await store._call(lambda db: db.execute("PRAGMA synchronous").fetchone()[0])
    assert got == level
    with sqlite3.connect(tmp_path / "s.db") as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
