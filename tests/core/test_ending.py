"""Every events() iterator ends with Ended, whatever ends the run; a cancelled run's result."""

from __future__ import annotations

import asyncio

import pytest

from steerable import (
    Run,
    Runner,
    ScriptedModel,
    Spec,
    open_session,
    transcript_problems,
)
from steerable.events import Ended, Event, ToolEnded
from steerable.models.scripted import call
from steerable.stores.memory import MemoryStore
from tests.core.support import hanging_model


async def collect(run: Run) -> list[Event]:
    return [event async for event in run.events()]


async def test_cancelling_the_awaiter_ends_every_event_stream_and_still_propagates() -> None:
    model, entered = hanging_model()
    run = Runner.start(Spec(), "go", model)
    streams = [asyncio.create_task(collect(run)) for _ in range(2)]

    async def caller() -> None:
        await run

    awaiter = asyncio.create_task(caller())
    await entered.wait()
    await asyncio.sleep(0)  # the iterators are listening
    awaiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await awaiter
    ends = []
    for events in await asyncio.wait_for(asyncio.gather(*streams), 10):
        last = events[-1]
        assert isinstance(last, Ended)
        ends.append(last)
        assert last.result.reason == "failed"
        assert isinstance(last.result.error, asyncio.CancelledError)
        assert [m.text for m in last.result.transcript] == ["go"]
    assert run.done()
    (late,) = [event async for event in run.events()]  # after the end: the same result
    assert isinstance(late, Ended) and late.result is ends[0].result is ends[1].result


async def test_a_run_cancelled_during_its_tool_calls_ends_with_a_valid_transcript() -> None:
    session = open_session("s", MemoryStore())
    started = asyncio.Event()

    async def forever() -> str:
        """Never finishes by itself."""
        started.set()
        await asyncio.sleep(3600)
        return "never"

    model = ScriptedModel([[call("forever"), call("forever")], "unused"])
    run = Runner.start(Spec(tools=[forever], session=session), "go", model)
    stream = asyncio.create_task(collect(run))

    async def caller() -> None:
        await run

    awaiter = asyncio.create_task(caller())
    await started.wait()
    run.steer("too late", id="late")
    awaiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await awaiter
    ended = (await asyncio.wait_for(stream, 10))[-1]
    assert isinstance(ended, Ended)
    result = ended.result
    assert transcript_problems(result.transcript) == []
    assert all("cancelled" in r.content for r in result.transcript[-1].tool_results)
    assert [s.id for s in result.unapplied_steers] == ["late"]
    # A cancelled run does no more I/O: the store holds what the last step saved.
    assert [m.text for m in await session.messages()] == ["go"]
    assert await session.steers() == []


@pytest.mark.parametrize("stop_first", [True, False])
async def test_a_stop_and_a_cancellation_at_once_still_cancel_the_awaiter(stop_first: bool) -> None:
    model, entered = hanging_model()
    run = Runner.start(Spec(), "go", model)
    stream = asyncio.create_task(collect(run))

    async def caller() -> None:
        await run

    awaiter = asyncio.create_task(caller())
    await entered.wait()
    if stop_first:
        run.stop()
    awaiter.cancel()
    if not stop_first:
        run.stop()
    with pytest.raises(asyncio.CancelledError):
        await awaiter
    ended = (await asyncio.wait_for(stream, 10))[-1]
    assert isinstance(ended, Ended)
    assert isinstance(ended.result.error, asyncio.CancelledError)


@pytest.mark.parametrize("calls", [1, 2])
async def test_a_sink_failing_during_the_tool_calls_ends_the_run_with_a_valid_transcript(
    calls: int,
) -> None:
    """The run fails, and the calls under way still get a result: the transcript stays valid."""

    async def echo(x: str) -> str:
        """Say it back."""
        return x

    def sink(event: Event) -> None:
        if isinstance(event, ToolEnded):
            raise RuntimeError("the sink broke")

    store = MemoryStore()
    session = open_session("sink", store)
    reply = [call("echo", f'{{"x": "{i}"}}', id=f"c{i}") for i in range(calls)]
    model = ScriptedModel([reply, "done"])
    result = await Runner.run(Spec(tools=[echo], session=session), "go", model, sink)
    assert result.reason == "failed"
    assert isinstance(result.error, RuntimeError)
    assert transcript_problems(list(result.transcript)) == []
    assert [r.call_id for r in result.transcript[-1].tool_results] == [
        f"c{i}" for i in range(calls)
    ]
    stored = await store.messages("sink")
    assert stored == list(result.transcript)
    assert transcript_problems(stored) == []
