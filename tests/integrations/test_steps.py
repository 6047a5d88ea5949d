"""Steps, the session side of a framework's run, and until_stopped."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from steerable import Session, TranscriptConflict, UsageError, assistant, user
from steerable.integrations import Steps, answer_text, until_stopped
from steerable.service import Turn
from steerable.service_store import Input
from steerable.stores.memory import MemoryStore


def _session() -> Session:
    return Session("s", MemoryStore())


async def test_a_step_stores_what_is_new_and_takes_the_steers_after_it() -> None:
    session = _session()
    steps = Steps(session, steers=16)
    prompt = user("go")
    assert await steps.step([prompt]) == []
    await session.steer("left, not right", id="st-1")
    reply = assistant("looking")
    taken = await steps.step([reply])
    assert [(m.id, m.steered, m.text) for m in taken] == [("st-1", True, "left, not right")]
    stored = await session.messages()
    assert [m.id for m in stored] == [prompt.id, reply.id, "st-1"]
    assert steps.stored == stored
    assert steps.taken == taken
    assert steps.steers_left == 15


async def test_the_cap_counts_down_and_save_takes_none() -> None:
    session = _session()
    steps = Steps(session, steers=1)
    for n in range(3):
        await session.steer(f"s{n}", id=f"st-{n}")
    assert [m.id for m in await steps.step([user("go")])] == ["st-0"]
    assert await steps.step([assistant("a")]) == []
    await steps.save([assistant("b")])
    assert [s.id for s in await session.steers()] == ["st-1", "st-2"]
    assert steps.steers_left == 0


async def test_a_transcript_that_is_not_the_stored_one_is_refused_and_changes_nothing() -> None:
    store = MemoryStore()
    await Session("s", store).save([user("first", id="a")])
    steps = Steps(Session("s", store), [user("other", id="b")])
    with pytest.raises(TranscriptConflict):
        await steps.step([assistant("x")])
    assert [m.id for m in steps.stored] == ["b"]  # what failed is not kept as stored
    assert [m.id for m in await Session("s", store).messages()] == ["a"]


def test_a_negative_cap_is_misuse() -> None:
    with pytest.raises(UsageError):
        Steps(_session(), steers=-1)


def _turn(session: Session) -> Turn:
    prompt = Input("send", "go", "p")
    return Turn(
        session="s",
        id="p",
        prompt=prompt,
        messages=[user("go", id="p")],
        store_session=session,
        resumed=False,
        steers_left=16,
    )


async def test_until_stopped_gives_the_result_of_a_run_that_ends() -> None:
    async def run() -> str:
        return "done"

    assert await until_stopped(_turn(_session()), run()) == ("done", False)


async def test_until_stopped_cancels_the_run_on_a_stop() -> None:
    turn, cancelled = _turn(_session()), asyncio.Event()

    async def run() -> str:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    async def stop_soon() -> None:
        await asyncio.sleep(0.01)
        turn.request_stop()

    stopper = asyncio.create_task(stop_soon())
    assert await until_stopped(turn, run()) == (None, True)
    await stopper
    assert cancelled.is_set()


async def test_until_stopped_passes_the_runs_error_on() -> None:
    async def run() -> str:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await until_stopped(_turn(_session()), run())


def test_an_answer_is_a_str_as_it_is_and_anything_else_json() -> None:
    @dataclasses.dataclass
    class Point:
        x: int

    assert answer_text("plain") == "plain"
    assert answer_text({"a": [1, Point(2)]}) == '{"a":[1,{"x":2}]}'
    assert answer_text(object()).startswith("<object object")


async def test_a_caller_cancelled_while_the_stopped_run_winds_down_is_cancelled() -> None:
    turn, winding = _turn(_session()), asyncio.Event()

    async def run() -> str:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            winding.set()
            await asyncio.sleep(60)  # a slow clean-up, itself cancelled below
            raise
        return "never"

    caller = asyncio.create_task(until_stopped(turn, run()))
    await asyncio.sleep(0)
    turn.request_stop()
    await winding.wait()
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
