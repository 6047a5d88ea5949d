"""ADK's session verbs over a steerable store: create, get, list, delete, scoped state.

The store contract has no listing and no delete, so the service keeps an index session per
app (``steerable.integrations.adk._index``); these tests hold its promises against a real
SQLite file: many creators at once all succeed, a session whose index write failed is still
read, only its owner deletes a session, and events load in append order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import pytest
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.base_session_service import GetSessionConfig
from google.adk.sessions.session import Session as AdkSession
from google.genai import types

from steerable import Session
from steerable.errors import StoreError, TranscriptConflict, UsageError
from steerable.integrations.adk import SteerableSessionService
from steerable.messages import Message, Text
from steerable.store import Steer, Store
from steerable.stores.memory import MemoryStore
from steerable.stores.sqlite import SQLiteStore


class Hooked:
    """A real store, with ``before_save`` awaited before each save it forwards.

    It times a real other writer deterministically: the hook writes to the inner store
    right before the service's own save, which then meets what the hook wrote."""

    def __init__(self, inner: Store, before_save: Callable[[str], Awaitable[None]]) -> None:
        self.inner = inner
        self.before_save = before_save

    async def messages(self, session: str) -> list[Message]:
        """The inner store's transcript."""
        return await self.inner.messages(session)

    async def save(
        self, session: str, messages: Sequence[Message], *, at: int, take: int = 0
    ) -> list[Message]:
        """The hook first, then the inner store's save."""
        await self.before_save(session)
        return await self.inner.save(session, messages, at=at, take=take)

    async def steer(self, session: str, steer: Steer) -> None:
        """The inner store's steer."""
        await self.inner.steer(session, steer)

    async def take_steers(self, session: str, *, at: int | None, limit: int) -> list[Message]:
        """The inner store's take."""
        return await self.inner.take_steers(session, at=at, limit=limit)

    async def steers(self, session: str) -> list[Steer]:
        """The inner store's box."""
        return await self.inner.steers(session)


def _event(text: str, timestamp: float, **delta: object) -> Event:
    return Event(
        author="user",
        invocation_id="i",
        timestamp=timestamp,
        content=types.Content(role="user", parts=[types.Part(text=text)]),
        actions=EventActions(state_delta=dict(delta)),
    )


async def test_thirty_creators_at_once_each_get_their_session_listed_and_readable(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "adk.db")
    # three stores on one file: writers that share nothing but the database
    async with SQLiteStore(path) as a, SQLiteStore(path) as b, SQLiteStore(path) as c:
        services = [SteerableSessionService(store) for store in (a, b, c)]
        made = await asyncio.gather(
            *(
                services[i % 3].create_session(app_name="app", user_id="u", session_id=f"s{i}")
                for i in range(30)
            ),
            return_exceptions=True,
        )
        listed = await services[0].list_sessions(app_name="app", user_id="u")
        read = [
            await services[1].get_session(app_name="app", user_id="u", session_id=f"s{i}")
            for i in range(30)
        ]
    assert [type(m).__name__ for m in made if isinstance(m, BaseException)] == []
    assert sorted(s.id for s in listed.sessions) == sorted(f"s{i}" for i in range(30))
    assert all(session is not None for session in read)


async def test_a_session_whose_index_write_failed_is_a_store_error_and_still_read(
    tmp_path: Path,
) -> None:
    async with SQLiteStore(str(tmp_path / "adk.db")) as inner:

        async def crowd(session: str) -> None:
            # another writer appends to the index right before each of the service's tries
            if session.startswith("adk-index:"):
                index = Session(session, inner)
                await index.save([*await index.messages(), Message("user", (Text("other"),))])

        service = SteerableSessionService(Hooked(inner, crowd))
        with pytest.raises(StoreError, match="could not be written") as failed:
            await service.create_session(app_name="app", user_id="u", session_id="s")
        again = await SteerableSessionService(inner).get_session(
            app_name="app", user_id="u", session_id="s"
        )
    assert not isinstance(failed.value, TranscriptConflict)
    assert again is not None and again.id == "s"  # not indexed, yet not lost


async def test_a_session_deleted_while_it_is_created_is_a_store_error(tmp_path: Path) -> None:
    async with SQLiteStore(str(tmp_path / "adk.db")) as inner:
        other = SteerableSessionService(inner)
        deleting: list[str] = []

        async def delete_first(session: str) -> None:
            # another process deletes the session between its header and its index record
            if session.startswith("adk-index:") and not deleting:
                deleting.append(session)
                await other.delete_session(app_name="app", user_id="u", session_id="s")

        service = SteerableSessionService(Hooked(inner, delete_first))
        with pytest.raises(StoreError, match="cannot be read back"):
            await service.create_session(app_name="app", user_id="u", session_id="s")


async def test_create_list_delete_by_owner_only_and_a_deleted_id_is_made_anew(
    tmp_path: Path,
) -> None:
    async with SQLiteStore(str(tmp_path / "adk.db")) as store:
        service = SteerableSessionService(store)
        for sid, user in (("a", "u"), ("b", "v"), ("c", "u")):
            await service.create_session(app_name="app", user_id=user, session_id=sid)
        with pytest.raises(AlreadyExistsError):
            await service.create_session(app_name="app", user_id="u", session_id="a")
        a = await service.get_session(app_name="app", user_id="u", session_id="a")
        assert a is not None
        await service.append_event(a, _event("before", 1.0))
        kept = service.session(app_name="app", user_id="u", session_id="a")
        await kept.steer("waiting", id="k")
        everyone = await service.list_sessions(app_name="app")
        mine = await service.list_sessions(app_name="app", user_id="u")
        # another user's delete, and another app's, leave the session alone
        await service.delete_session(app_name="app", user_id="v", session_id="a")
        await service.delete_session(app_name="other", user_id="u", session_id="a")
        still = await service.get_session(app_name="app", user_id="u", session_id="a")
        await service.delete_session(app_name="app", user_id="u", session_id="a")
        gone = await SteerableSessionService(store).get_session(
            app_name="app", user_id="u", session_id="a"
        )
        after = await service.list_sessions(app_name="app")
        forgotten = (await kept.messages(), await kept.steers())
        again = await service.create_session(app_name="app", user_id="u", session_id="a")
        last = await service.list_sessions(app_name="app")
    # least recently updated first: "a" has an event stamped 1.0, before b and c were made
    assert [(s.id, s.user_id) for s in everyone.sessions] == [("a", "u"), ("b", "v"), ("c", "u")]
    assert [s.id for s in mine.sessions] == ["a", "c"]
    assert still is not None and gone is None
    assert [s.id for s in after.sessions] == ["b", "c"]
    assert forgotten == ([], [])  # the store forgot its transcript and its steer box
    assert again.events == [] and [s.id for s in last.sessions] == ["b", "c", "a"]


async def test_app_and_user_state_are_shared_by_their_scope_and_the_rest_is_the_sessions(
    tmp_path: Path,
) -> None:
    async with SQLiteStore(str(tmp_path / "adk.db")) as store:
        service = SteerableSessionService(store)
        first = await service.create_session(
            app_name="app",
            user_id="u",
            session_id="s1",
            state={"app:theme": "dark", "user:name": "Ada", "draft": 1, "temp:x": 0},
        )
        await service.append_event(first, _event("hi", 1.0, **{"user:name": "Grace"}))
        await service.create_session(app_name="app", user_id="u", session_id="s2")
        await service.create_session(app_name="app", user_id="v", session_id="s3")
        fresh = SteerableSessionService(store)
        states = {
            sid: (await fresh.get_session(app_name="app", user_id=uid, session_id=sid))
            for sid, uid in (("s1", "u"), ("s2", "u"), ("s3", "v"))
        }
    state = {sid: dict(s.state) for sid, s in states.items() if s is not None}
    assert state == {
        "s1": {"app:theme": "dark", "user:name": "Grace", "draft": 1},
        "s2": {"app:theme": "dark", "user:name": "Grace"},
        "s3": {"app:theme": "dark"},
    }


async def test_events_load_in_append_order_though_their_timestamps_fall(tmp_path: Path) -> None:
    async with SQLiteStore(str(tmp_path / "adk.db")) as store:
        service = SteerableSessionService(store)
        session = await service.create_session(app_name="app", user_id="u", session_id="s")
        for text, stamp in (("one", 30.0), ("two", 20.0), ("three", 10.0), ("four", 40.0)):
            await service.append_event(session, _event(text, stamp))
        fresh = SteerableSessionService(store)
        loaded = await fresh.get_session(app_name="app", user_id="u", session_id="s")
        recent = await fresh.get_session(
            app_name="app",
            user_id="u",
            session_id="s",
            config=GetSessionConfig(num_recent_events=2),
        )
        none = await fresh.get_session(
            app_name="app",
            user_id="u",
            session_id="s",
            config=GetSessionConfig(num_recent_events=0),
        )
        after = await fresh.get_session(
            app_name="app",
            user_id="u",
            session_id="s",
            config=GetSessionConfig(after_timestamp=20.0),
        )

    def texts(session: AdkSession | None) -> list[str]:
        assert session is not None
        return [
            e.content.parts[0].text or "" for e in session.events if e.content and e.content.parts
        ]

    assert texts(loaded) == ["one", "two", "three", "four"]
    assert texts(recent) == ["three", "four"]
    assert texts(none) == []
    assert texts(after) == ["one", "two", "four"]  # a filter by time, still in append order


async def test_over_session_for_listing_and_deleting_are_usage_errors(tmp_path: Path) -> None:
    async with SQLiteStore(str(tmp_path / "adk.db")) as store:
        service = SteerableSessionService(session_for=lambda sid: Session(sid, store))
        with pytest.raises(UsageError, match="list sessions"):
            await service.list_sessions(app_name="app")
        with pytest.raises(UsageError, match="delete sessions"):
            await service.delete_session(app_name="app", user_id="u", session_id="s")


@pytest.mark.parametrize("steers", [-1, True, 1.5, "3"])
def test_a_steer_cap_that_is_not_a_count_is_refused_when_the_service_is_built(
    steers: object,
) -> None:
    with pytest.raises(UsageError, match="steers"):
        SteerableSessionService(MemoryStore(), steers=steers)  # type: ignore[arg-type]
