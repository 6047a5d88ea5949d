"""Orphaned tool calls repaired on load: what ``plan_repair`` changes (and leaves), and a run
that stores the repair once, on the memory and SQLite stores."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from steerable import (
    Message,
    Runner,
    ScriptedModel,
    Spec,
    Text,
    ToolCall,
    ToolResult,
    TranscriptConflict,
    assistant,
    open_session,
    transcript_problems,
    user,
)
from steerable.events import Event, Repaired
from steerable.repair import ORPHANED, plan_repair
from steerable.store import Store
from steerable.stores.memory import MemoryStore
from steerable.stores.sqlite import SQLiteStore


def _calls(*ids: str, id: str = "reply") -> Message:
    return Message("assistant", tuple(ToolCall(i, "look", "{}") for i in ids), id=id)


def _results(*ids: str, id: str = "results") -> Message:
    return Message("user", tuple(ToolResult(i, "look", f"found {i}") for i in ids), id=id)


def _unknown(*ids: str) -> tuple[ToolResult, ...]:
    return tuple(ToolResult(i, "look", ORPHANED, True) for i in ids)


def test_a_valid_transcript_needs_no_repair() -> None:
    prompt = user("hi")
    assert plan_repair([]) is None
    assert plan_repair([prompt, _calls("a", "b"), _results("b", "a"), assistant("ok")]) is None
    assert plan_repair([prompt, _calls("a")]) is None  # pending at the end: carried on


def test_a_call_followed_by_a_prompt_gets_a_results_message_put_before_it() -> None:
    prompt, later = user("hi"), user("and now?")
    transcript = [prompt, _calls("a", "b"), later]
    repair = plan_repair(transcript)
    assert repair is not None
    assert (repair.at, repair.old) == (2, (later.id,))
    added, kept = repair.messages
    assert (added.id, added.role, added.parts) == ("reply.results", "user", _unknown("a", "b"))
    assert kept is later
    fixed = [*transcript[: repair.at], *repair.messages]
    assert transcript_problems(fixed) == [] and plan_repair(fixed) is None


def test_missing_results_are_added_in_call_order_and_stray_ones_dropped() -> None:
    mixed = Message(
        "user",
        (ToolResult("zz", "look", "stray"), ToolResult("b", "look", "found b"), Text("note")),
        id="mixed",
        steered=True,
    )
    transcript = [user("hi"), _calls("a", "b"), mixed, assistant("ok")]
    repair = plan_repair(transcript)
    assert repair is not None and repair.at == 2
    fixed = repair.messages[0]
    assert (fixed.id, fixed.steered) == ("mixed", True)  # the same message, mended
    assert fixed.parts == (*_unknown("a"), ToolResult("b", "look", "found b"), Text("note"))
    assert repair.messages[1] is transcript[3]
    assert len(repair.problems) == 2


def test_a_message_of_stray_results_alone_is_dropped() -> None:
    transcript = [user("hi"), assistant("ok"), _results("x"), user("next")]
    repair = plan_repair(transcript)
    assert repair is not None
    assert (repair.at, repair.messages) == (2, (transcript[3],))


def test_the_added_id_is_free_in_the_transcript() -> None:
    transcript = [user("x", id="reply.results"), _calls("a"), user("next")]
    repair = plan_repair(transcript)
    assert repair is not None and repair.messages[0].id == "reply.results.2"


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    if request.param == "memory":
        yield MemoryStore()
        return
    async with SQLiteStore(tmp_path / "repair.db") as sqlite:
        yield sqlite


async def test_a_run_repairs_what_it_loads_once_and_the_provider_would_take_it(
    store: Store,
) -> None:
    broken = [user("hi"), _calls("a"), user("and now?")]
    await store.save("s", broken, at=0)
    for attempt in range(2):
        session = open_session("s", store)
        events: list[Event] = []
        messages = await session.messages()
        model = ScriptedModel(["answered"])
        result = await Runner.run(Spec(session=session), messages, model, events.append)
        repaired = [e for e in events if isinstance(e, Repaired)]
        assert result.reason == "completed", result.error
        assert len(repaired) == (1 if attempt == 0 else 0)
        stored = await store.messages("s")
        assert transcript_problems(stored) == []
        if attempt == 0:
            assert repaired[0].at == 2
            assert [m.id for m in stored[:4]] == [
                broken[0].id,
                "reply",
                "reply.results",
                broken[2].id,
            ]
            assert model.requests[0].messages == tuple(stored[:4])
        await store.save("s", [user(f"turn {attempt + 2}")], at=len(stored))


async def test_a_repair_over_a_transcript_that_moved_on_is_refused(store: Store) -> None:
    """The swap compares the tail: another writer's message makes the run's repair fail."""
    broken = [user("hi"), _calls("a"), user("and now?")]
    await store.save("s", broken, at=0)
    session = open_session("s", store)
    messages = await session.messages()
    await store.save("s", [assistant("someone else")], at=3)
    result = await Runner.run(Spec(session=session), messages, ScriptedModel(["x"]))
    assert result.reason == "failed" and isinstance(result.error, TranscriptConflict)
    assert [m.id for m in await store.messages("s")][:3] == [m.id for m in broken]


async def test_without_a_session_the_repair_is_made_for_the_request_only() -> None:
    events: list[Event] = []
    model = ScriptedModel(["answered"])
    broken = [user("hi"), _calls("a"), user("and now?")]
    result = await Runner.run(Spec(), broken, model, events.append)
    assert result.reason == "completed"
    assert transcript_problems(model.requests[0].messages) == []
    assert [type(e) for e in events if isinstance(e, Repaired)] == [Repaired]


async def test_a_repair_before_a_new_prompt_stores_only_what_was_stored(store: Store) -> None:
    """The usual case: a reply left without results, then a new prompt the caller appended
    (not yet stored). The results are stored after the reply; the prompt at its step."""
    stored = [user("hi"), _calls("a")]
    await store.save("s", stored, at=0)
    session = open_session("s", store)
    prompt = user("and now?")
    messages = [*await session.messages(), prompt]
    result = await Runner.run(Spec(session=session), messages, ScriptedModel(["answered"]))
    assert result.reason == "completed", result.error
    after = await store.messages("s")
    assert [m.id for m in after] == [stored[0].id, "reply", "reply.results", prompt.id, after[4].id]
    assert transcript_problems(after) == []


async def test_a_long_stored_transcript_is_swapped_only_where_it_changed(store: Store) -> None:
    """The swap starts at the first broken message, not at the start of the transcript."""
    early = [m for i in range(50) for m in (user(f"q{i}"), assistant(f"a{i}"))]
    await store.save("s", [*early, _calls("a"), user("next")], at=0)
    calls: list[tuple[int, int]] = []
    swap = store.replace  # type: ignore[attr-defined]

    async def spying(session: str, *, at: int, old: Any, messages: Any) -> None:
        calls.append((at, len(old)))
        await swap(session, at=at, old=old, messages=messages)

    store.replace = spying  # type: ignore[attr-defined]
    session = open_session("s", store)
    messages = await session.messages()
    result = await Runner.run(Spec(session=session), messages, ScriptedModel(["ok"]))
    assert result.reason == "completed", result.error
    assert calls == [(101, 1)]
