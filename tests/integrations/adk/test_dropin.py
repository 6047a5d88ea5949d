"""SteerableSessionService where code written for ADK's own services expects them.

Each test holds one point where ours once differed from ``InMemorySessionService`` and
``DatabaseSessionService``: ids per app and user, listing with state by last update, padded
ids, ``get_user_state``, an event appended twice, a deleted session, a stale session object
and a writer that overtook another. Each runs on SQLite and on Postgres (the ``store``
fixture of ``conftest.py``): each point lives in the store, its keys, its index, its
conflicts.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from google.adk.errors import StaleSessionError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.session import Session as AdkSession
from google.genai import types

from steerable import Session
from steerable.errors import StoreError, TranscriptConflict, UsageError
from steerable.integrations.adk import SteerableSessionService
from steerable.integrations.adk._index import AppIndex, session_key
from steerable.integrations.adk._records import FRAMEWORK, header_message
from steerable.messages import Message, Native
from steerable.store import Store


def _said(text: str, timestamp: float | None = None, **delta: object) -> Event:
    event = Event(
        author="user",
        invocation_id="i",
        content=types.Content(role="user", parts=[types.Part(text=text)]),
        actions=EventActions(state_delta=dict(delta)),
    )
    if timestamp is not None:
        event.timestamp = timestamp
    return event


def _texts(session: AdkSession | None) -> list[str]:
    assert session is not None
    return [e.content.parts[0].text or "" for e in session.events if e.content and e.content.parts]


async def test_ids_are_per_app_and_user_whatever_separators_the_names_hold(store: Store) -> None:
    service = SteerableSessionService(store)
    # the same id for another user, another app, and names a plain separator would confuse
    owners = [("app", "u1"), ("app", "u2"), ("app2", "u1"), ("a:1", "b"), ("a", "1:b")]
    for app, user in owners:
        made = await service.create_session(app_name=app, user_id=user, session_id="s1")
        await service.append_event(made, _said(f"{app}/{user}"))
    fresh = SteerableSessionService(store)
    read = {
        owner: _texts(await fresh.get_session(app_name=owner[0], user_id=owner[1], session_id="s1"))
        for owner in owners
    }
    keys = {session_key(app, user, "s1") for app, user in owners}
    assert read == {(app, user): [f"{app}/{user}"] for app, user in owners}
    assert len(keys) == len(owners)
    assert session_key("a", "b:1:c", "d") != session_key("a", "b", "c:1:d")


async def test_list_sessions_gives_each_state_least_recently_updated_first(store: Store) -> None:
    service = SteerableSessionService(store)
    for sid in ("a", "b", "c"):
        await service.create_session(
            app_name="app", user_id="u", session_id=sid, state={"own": sid, "user:name": "Ada"}
        )
    await service.create_session(app_name="app", user_id="v", session_id="d")
    a = await service.get_session(app_name="app", user_id="u", session_id="a")
    assert a is not None
    await service.append_event(a, _said("later", a.last_update_time + 60, **{"app:theme": "dark"}))
    mine = await SteerableSessionService(store).list_sessions(app_name="app", user_id="u")
    everyone = await SteerableSessionService(store).list_sessions(app_name="app")
    assert [(s.id, dict(s.state)) for s in mine.sessions] == [
        ("b", {"own": "b", "user:name": "Ada", "app:theme": "dark"}),
        ("c", {"own": "c", "user:name": "Ada", "app:theme": "dark"}),
        ("a", {"own": "a", "user:name": "Ada", "app:theme": "dark"}),
    ]
    assert all(s.events == [] for s in mine.sessions)
    assert [s.id for s in everyone.sessions] == ["b", "c", "d", "a"]


async def test_a_padded_id_is_the_stripped_one_in_every_verb(store: Store) -> None:
    service = SteerableSessionService(store)
    made = await service.create_session(app_name="app", user_id="u", session_id="order-42\n")
    await service.append_event(made, _said("hello"))
    padded = await service.get_session(app_name="app", user_id="u", session_id=" order-42\n")
    plain = await SteerableSessionService(store).get_session(
        app_name="app", user_id="u", session_id="order-42"
    )
    await service.delete_session(app_name="app", user_id="u", session_id="order-42 ")
    gone = await service.get_session(app_name="app", user_id="u", session_id="order-42")
    assert made.id == "order-42"
    assert _texts(padded) == _texts(plain) == ["hello"]
    assert gone is None


async def test_get_user_state_is_the_users_across_sessions_not_anothers(store: Store) -> None:
    service = SteerableSessionService(store)
    none = await service.get_user_state(app_name="app", user_id="u")
    first = await service.create_session(
        app_name="app", user_id="u", state={"user:name": "Ada", "app:x": 1, "own": 2}
    )
    await service.append_event(first, _said("hi", None, **{"user:counter": 1}))
    await service.append_event(first, _said("hi", None, **{"user:counter": 2}))
    other = await service.create_session(app_name="app", user_id="v")
    await service.append_event(other, _said("hi", None, **{"user:name": "Grace"}))
    mine = await SteerableSessionService(store).get_user_state(app_name="app", user_id="u")
    elsewhere = await service.get_user_state(app_name="app2", user_id="u")
    assert none == {} and elsewhere == {}
    assert mine == {"name": "Ada", "counter": 2}


async def test_over_session_for_get_user_state_is_a_usage_error_adk_callers_catch() -> None:
    from steerable.stores.memory import MemoryStore

    store = MemoryStore()
    service = SteerableSessionService(session_for=lambda sid: Session(sid, store))
    with pytest.raises(NotImplementedError) as refused:
        await service.get_user_state(app_name="app", user_id="u")
    assert isinstance(refused.value, UsageError)


async def test_an_event_appended_again_is_stored_once_two_sharing_an_id_both(
    store: Store,
) -> None:
    service = SteerableSessionService(store)
    session = await service.create_session(app_name="app", user_id="u", session_id="s")
    event = _said("once", k=1)
    await service.append_event(session, event)
    await service.append_event(session, event)  # a retry: the same event object
    await service.append_event(session, event.model_copy(deep=True))  # an equal copy
    twin = _said("another with the same id")
    twin.id = event.id
    await service.append_event(session, twin)
    loaded = await SteerableSessionService(store).get_session(
        app_name="app", user_id="u", session_id="s"
    )
    assert _texts(session) == ["once", "another with the same id"]
    assert _texts(loaded) == ["once", "another with the same id"]
    assert loaded is not None and [e.id for e in loaded.events] == [event.id, event.id]


async def test_an_append_to_a_deleted_session_is_session_not_found(store: Store) -> None:
    service = SteerableSessionService(store)
    here = await service.create_session(app_name="app", user_id="u", session_id="here")
    there = await service.create_session(app_name="app", user_id="u", session_id="there")
    never = AdkSession(id="never", app_name="app", user_id="u")
    await service.delete_session(app_name="app", user_id="u", session_id="here")
    # deleted by another process: this service still has the session open
    await SteerableSessionService(store).delete_session(
        app_name="app", user_id="u", session_id="there"
    )
    failures = []
    for session in (here, there, never):
        with pytest.raises(SessionNotFoundError) as failed:
            await service.append_event(session, _said("too late"))
        failures.append(failed.value)
    assert all(isinstance(f, StoreError) for f in failures)
    assert _texts(here) == [] and _texts(there) == []


async def test_a_stale_session_object_is_refused_and_nothing_is_stored(store: Store) -> None:
    service = SteerableSessionService(store)
    original = await service.create_session(app_name="app", user_id="u", session_id="s")
    await service.append_event(original, _said("one", k1=1))
    updated = await service.get_session(app_name="app", user_id="u", session_id="s")
    assert updated is not None
    await service.append_event(updated, _said("two", k2=2))
    with pytest.raises(StaleSessionError, match="modified in storage") as refused:
        await service.append_event(original, _said("three", k3=3))
    final = await SteerableSessionService(store).get_session(
        app_name="app", user_id="u", session_id="s"
    )
    assert isinstance(refused.value, TranscriptConflict)
    assert _texts(original) == ["one"] and "k3" not in original.state
    assert _texts(final) == ["one", "two"] and final is not None and "k3" not in final.state


async def test_two_copies_of_one_session_appending_at_once_one_wins(store: Store) -> None:
    service = SteerableSessionService(store)
    await service.create_session(app_name="app", user_id="u", session_id="s")
    for round in range(3):
        latest = await service.get_session(app_name="app", user_id="u", session_id="s")
        assert latest is not None
        copies = [latest.model_copy(deep=True) for _ in range(2)]
        outcomes = await asyncio.gather(
            *(service.append_event(c, _said(f"{round}-{i}")) for i, c in enumerate(copies)),
            return_exceptions=True,
        )
        assert sorted(type(o).__name__ for o in outcomes) == ["Event", "StaleSession"]
    final = await service.get_session(app_name="app", user_id="u", session_id="s")
    assert len(_texts(final)) == 3


async def test_a_writer_another_process_overtook_gets_adks_stale_session_error(
    store: Store,
) -> None:
    ours, theirs = SteerableSessionService(store), SteerableSessionService(store)
    await ours.create_session(app_name="app", user_id="u", session_id="s")
    mine = await ours.get_session(app_name="app", user_id="u", session_id="s")
    other = await theirs.get_session(app_name="app", user_id="u", session_id="s")
    assert mine is not None and other is not None
    await theirs.append_event(other, _said("theirs"))
    with pytest.raises(StaleSessionError) as refused:
        await ours.append_event(mine, _said("mine"))
    again = await ours.get_session(app_name="app", user_id="u", session_id="s")
    assert again is not None
    await ours.append_event(again, _said("mine, after reading again"))
    assert isinstance(refused.value, TranscriptConflict)
    assert _texts(mine) == []
    assert _texts(await theirs.get_session(app_name="app", user_id="u", session_id="s")) == [
        "theirs",
        "mine, after reading again",
    ]


async def test_a_session_stored_under_the_old_mapping_is_read_listed_and_deleted(
    store: Store,
) -> None:
    # as the service stored it before ids were per app and user: the transcript under the
    # ADK id itself, and an index record with no key
    await Session("old", store).save([header_message("app", "u", {"own": 1}, 5.0)])
    await AppIndex(store, "app").append({"created": "old", "user_id": "u", "time": 5.0})
    service = SteerableSessionService(store)
    old = await service.get_session(app_name="app", user_id="u", session_id="old")
    assert old is not None
    await service.append_event(old, _said("still here"))
    listed = await service.list_sessions(app_name="app", user_id="u")
    again = await SteerableSessionService(store).get_session(
        app_name="app", user_id="u", session_id="old"
    )
    kept = await Session("old", store).messages()
    await service.delete_session(app_name="app", user_id="u", session_id="old")
    gone = await service.get_session(app_name="app", user_id="u", session_id="old")
    assert [(s.id, dict(s.state)) for s in listed.sessions] == [("old", {"own": 1})]
    assert _texts(again) == ["still here"] and len(kept) == 2
    assert gone is None and await Session("old", store).messages() == []


async def test_the_index_records_where_each_session_is_kept(store: Store) -> None:
    service = SteerableSessionService(store)
    await service.create_session(app_name="app", user_id="u", session_id="s")
    stored = await Session("adk-index:app", store).messages()
    records = [json.loads(p.data) for m in stored for p in m.parts if isinstance(p, Native)]
    kept = await Session(session_key("app", "u", "s"), store).messages()
    assert [r.get("key") for r in records] == [session_key("app", "u", "s")]
    assert [p.framework for m in kept for p in m.parts if isinstance(p, Native)] == [FRAMEWORK]
    assert isinstance(kept[0], Message)
