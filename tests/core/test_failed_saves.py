"""What the run asks of the store: one call per step, and no steer lost when a save fails."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path

import pytest

from steerable import (
    Message,
    Run,
    Runner,
    ScriptedModel,
    Spec,
    Steer,
    Store,
    StoreUnavailable,
    TranscriptConflict,
    open_session,
    transcript_problems,
)
from steerable.models.scripted import ScriptEntry, call
from steerable.stores.memory import MemoryStore
from steerable.stores.sqlite import SQLiteStore
from tests.core.support import hanging_model


class FlakyStore:
    """A real store whose save fails when told to: before it reaches the store, or after
    it committed (the answer was lost). Records every call, with a save's ``take``."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.fail: Exception | None = None
        self.committed = False  # the failing save commits first
        self.calls: list[str] = []

    async def messages(self, session: str) -> list[Message]:
        self.calls.append("messages")
        return await self.inner.messages(session)

    async def save(
        self, session: str, messages: Sequence[Message], *, at: int, take: int = 0
    ) -> list[Message]:
        self.calls.append(f"save(take={take})")
        fail, self.fail = self.fail, None
        if fail is not None and not self.committed:
            raise fail
        taken = await self.inner.save(session, messages, at=at, take=take)
        if fail is not None:
            raise fail
        return taken

    async def steer(self, session: str, steer: Steer) -> None:
        self.calls.append("steer")
        await self.inner.steer(session, steer)

    async def take_steers(self, session: str, *, at: int | None, limit: int) -> list[Message]:
        self.calls.append("take_steers")
        return await self.inner.take_steers(session, at=at, limit=limit)

    async def steers(self, session: str) -> list[Steer]:
        self.calls.append("steers")
        return await self.inner.steers(session)


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    if request.param == "memory":
        yield MemoryStore()
        return
    async with SQLiteStore(tmp_path / "s.db") as sqlite:
        yield sqlite


def echo(text: str) -> str:
    """Say it back."""
    return text


async def test_a_step_is_one_save_and_take_and_nothing_else(store: Store) -> None:
    flaky = FlakyStore(store)
    await flaky.inner.steer("s", Steer("waiting", "w"))
    script: list[ScriptEntry] = [
        call("echo", '{"text": "a"}'),
        call("echo", '{"text": "b"}'),
        "done",
    ]
    spec = Spec(tools=[echo], session=open_session("s", flaky), steers_per_turn=4)
    result = await Runner.run(spec, "go", ScriptedModel(script))
    assert result.reason == "completed"
    assert [m.id for m in result.steers] == ["w"]  # taken by the first step's save
    # The first save learns the stored length (one read); each step after is one call
    # that saves and takes; the end is one save that takes nothing.
    assert flaky.calls == [
        "messages",
        "save(take=4)",
        "save(take=3)",
        "save(take=3)",
        "save(take=0)",
    ]


def steer_then_fail(
    holder: list[Run], store: FlakyStore, fail: Exception, *, committed: bool = False
) -> Callable[[], Awaitable[str]]:
    """A tool that steers the run (id ``k``) and makes the next save fail."""

    async def tool() -> str:
        holder[0].steer("do it in celsius", id="k")
        store.fail, store.committed = fail, committed
        return "ok"

    return tool


@pytest.mark.parametrize(
    "fail", [TranscriptConflict("s", 2, 3), StoreUnavailable("the disk is gone")]
)
async def test_a_run_steer_whose_save_failed_is_unapplied_and_left_in_the_store(
    store: Store, fail: Exception
) -> None:
    flaky = FlakyStore(store)
    session = open_session("s", flaky)
    holder: list[Run] = []
    tool = steer_then_fail(holder, flaky, fail)
    model = ScriptedModel([call("tool"), "never asked"])
    holder.append(Runner.start(Spec(tools=[tool], session=session), "go", model))
    result = await holder[0]

    assert result.reason == "failed" and result.error is fail
    assert [s.id for s in result.unapplied_steers] == ["k"]
    assert result.steers == ()
    assert all(not m.steered for m in result.transcript)
    assert transcript_problems(result.transcript) == []
    assert [(s.id, s.text) for s in await store.steers("s")] == [("k", "do it in celsius")]
    # the next run takes it, once
    later = open_session("s", store)
    model = ScriptedModel(["done in celsius"])
    after = await Runner.run(Spec(session=later), await later.messages(), model)
    assert [m.id for m in after.steers] == ["k"]
    assert [m.id for m in await store.messages("s")].count("k") == 1


async def test_a_save_that_committed_though_it_raised_records_its_steer_once(
    store: Store,
) -> None:
    flaky = FlakyStore(store)
    session = open_session("s", flaky)
    holder: list[Run] = []
    tool = steer_then_fail(holder, flaky, StoreUnavailable("the answer was lost"), committed=True)
    model = ScriptedModel([call("tool"), "never asked"])
    holder.append(Runner.start(Spec(tools=[tool], session=session), "go", model))
    result = await holder[0]
    assert [s.id for s in result.unapplied_steers] == ["k"]

    later = open_session("s", store)
    stored = await later.messages()
    assert stored[-1].id == "k" and stored[-1].steered  # it did commit
    model = ScriptedModel(["answered"])
    await Runner.run(Spec(session=later), stored, model)
    (request,) = model.requests
    assert [m.id for m in request.messages].count("k") == 1
    assert [m.id for m in await store.messages("s")].count("k") == 1
    assert await store.steers("s") == []


async def test_a_stopped_run_leaves_its_unapplied_steers_in_the_store(store: Store) -> None:
    session = open_session("s", store)
    model, entered = hanging_model()
    run = Runner.start(Spec(session=session), "go", model)
    await entered.wait()
    run.steer("first", id="a")
    run.steer("second", id="b")
    run.stop()
    result = await run
    assert result.reason == "stopped"
    assert [s.id for s in result.unapplied_steers] == ["a", "b"]
    assert [s.id for s in await store.steers("s")] == ["a", "b"]
