"""The ReAct loop: endings, tools that fail, resuming, and what session=None costs."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

import steerable.events
import steerable.models.base
from steerable import (
    Message,
    ModelEvent,
    ModelRequest,
    Reply,
    Run,
    Runner,
    ScriptedModel,
    Spec,
    TextDelta,
    ToolResult,
    assistant,
    open_session,
    tool,
    transcript_problems,
    user,
)
from steerable.errors import ScriptExhausted
from steerable.events import Ended, Event, Replied, Saved, ToolEnded, ToolStarted
from steerable.models.scripted import ScriptEntry, call
from steerable.stores.memory import MemoryStore
from tests.core.support import hanging_model


def echo(text: str) -> str:
    """Say it back."""
    return text


def results(transcript: Sequence[Message]) -> list[ToolResult]:
    return [r for m in transcript for r in m.tool_results]


class RecordingStore(MemoryStore):
    """A memory store that records every call made to it."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def __getattribute__(self, name: str) -> Any:
        if name in ("messages", "save", "steer", "take_steers", "steers"):
            object.__getattribute__(self, "calls").append(name)
        return object.__getattribute__(self, name)


async def test_session_none_makes_no_store_call_and_changes_nothing() -> None:
    store = RecordingStore()
    open_session("unused", store)  # a session that exists but is not in the spec
    script: list[ScriptEntry] = [call("echo", '{"text": "hi"}'), "done"]
    without = await Runner.run(Spec(tools=[echo]), "go", ScriptedModel(script))
    again = await Runner.run(Spec(tools=[echo], session=None), "go", ScriptedModel(script))
    assert store.calls == []
    strip = [(m.role, m.parts, m.steered) for m in without.transcript]
    assert strip == [(m.role, m.parts, m.steered) for m in again.transcript]
    assert (without.reason, without.output, without.steps, without.usage) == (
        again.reason,
        again.output,
        again.steps,
        again.usage,
    )


async def test_with_a_session_it_saves_before_every_request_and_once_at_the_end() -> None:
    store = RecordingStore()
    session = open_session("s", store)
    script: list[ScriptEntry] = [
        call("echo", '{"text": "a"}'),
        call("echo", '{"text": "b"}'),
        "done",
    ]
    result = await Runner.run(Spec(tools=[echo], session=session), "go", ScriptedModel(script))
    assert store.calls.count("save") == 4  # three requests, then the answer
    assert await store.messages("s") == list(result.transcript)


async def test_resume_a_transcript_ending_in_a_tool_result_as_it_is() -> None:
    store = MemoryStore()
    session = open_session("s", store)
    reply = Message("assistant", (call("echo", '{"text": "x"}'),))
    stored = [
        user("go"),
        reply,
        Message("user", (ToolResult(reply.tool_calls[0].id, "echo", "x"),)),
    ]
    await store.save("s", stored, at=0)

    model = ScriptedModel(["finished"])
    result = await Runner.run(Spec(tools=[echo], session=session), await session.messages(), model)
    assert list(model.requests[0].messages) == stored
    assert result.output == "finished"
    assert await store.messages("s") == [*stored, result.transcript[-1]]


async def test_resume_a_transcript_ending_in_an_answer_with_the_new_message_appended() -> None:
    store = MemoryStore()
    session = open_session("s", store)
    first = await Runner.run(Spec(session=session), "one", ScriptedModel(["answer one"]))
    assert first.transcript[-1].role == "assistant"

    later = open_session("s", store)  # another process would open its own
    messages = [*await later.messages(), user("two")]
    model = ScriptedModel(["answer two"])
    await Runner.run(Spec(session=later), messages, model)
    assert [m.text for m in model.requests[0].messages] == ["one", "answer one", "two"]
    assert [m.text for m in await store.messages("s")] == ["one", "answer one", "two", "answer two"]


async def test_a_transcript_that_does_not_start_with_what_is_stored_is_a_conflict() -> None:
    from steerable import TranscriptConflict

    store = MemoryStore()
    await Runner.run(Spec(session=open_session("s", store)), "one", ScriptedModel(["a"]))
    result = await Runner.run(
        Spec(session=open_session("s", store)), "forgot to load", ScriptedModel(["b"])
    )
    assert result.reason == "failed"
    assert isinstance(result.error, TranscriptConflict)
    assert [m.text for m in await store.messages("s")] == ["one", "a"]


async def test_stop_during_a_tool_call_ends_the_run_with_a_valid_transcript() -> None:
    session = open_session("s", MemoryStore())
    started, finished = asyncio.Event(), asyncio.Event()

    async def forever() -> str:
        """Never finishes by itself."""
        started.set()
        await asyncio.sleep(3600)
        return "never"

    async def quick(text: str) -> str:
        finished.set()
        return text

    model = ScriptedModel([[call("forever"), call("quick", '{"text": "quick"}')], "unused"])
    run = Runner.start(Spec(tools=[forever, quick], session=session), "go", model)
    await started.wait()
    await finished.wait()
    run.stop()
    result = await run
    assert result.reason == "stopped"
    assert transcript_problems(result.transcript) == []
    cut, done = results(result.transcript)
    assert cut.is_error and "stopped" in cut.content
    assert not done.is_error and done.content == "quick"
    assert await session.messages() == list(result.transcript)


async def test_stop_during_the_model_request() -> None:
    model, entered = hanging_model()
    run = Runner.start(Spec(), "go", model)
    await entered.wait()
    run.stop()
    result = await run
    assert result.reason == "stopped"
    assert [m.text for m in result.transcript] == ["go"]


async def test_stop_before_the_first_request() -> None:
    run = Runner.start(Spec(), "go", ScriptedModel(["never asked"]))
    run.stop()
    result = await run
    assert (result.reason, result.steps) == ("stopped", 0)


async def test_cancelling_the_run_task_propagates() -> None:
    model, entered = hanging_model()

    async def caller() -> None:
        await Runner.run(Spec(), "go", model)

    task = asyncio.create_task(caller())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_max_steps_ends_the_run_after_that_many_requests() -> None:
    model = ScriptedModel([call("echo", '{"text": "again"}')] * 5)
    result = await Runner.run(Spec(tools=[echo], max_steps=3), "loop", model)
    assert (result.reason, result.steps, len(model.requests)) == ("max_steps", 3, 3)
    assert result.output == ""
    assert transcript_problems(result.transcript) == []
    assert result.transcript[-1].tool_results


async def test_at_max_steps_a_steer_sent_during_the_last_call_is_left_for_the_next_turn() -> None:
    # no model request follows the last save: a steer taken there would be answered by none
    session = open_session("s", MemoryStore())
    calls = 0

    async def work() -> str:
        """Works."""
        nonlocal calls
        calls += 1
        if calls == 2:  # the last step's call: steers come in now
            run.steer("from the run")
            await session.steer("from the store")
        return "done"

    model = ScriptedModel([call("work", "{}")] * 3)
    run = Runner.start(Spec(tools=[tool(work)], session=session, max_steps=2), "go", model)
    result = await run
    assert (result.reason, result.steps, len(model.requests)) == ("max_steps", 2, 2)
    assert result.steers == ()
    assert [s.text for s in result.unapplied_steers] == ["from the run"]
    # the run's unapplied steer is left in the store too, after the one already there
    assert [m.text for m in await session.steers()] == ["from the store", "from the run"]
    assert result.transcript[-1].tool_results
    assert await session.messages() == list(result.transcript)


async def test_a_raising_tool_gives_the_model_an_error_result_and_the_run_goes_on() -> None:
    def broken(x: int) -> str:
        """Always fails."""
        raise RuntimeError(f"disk on fire ({x})")

    model = ScriptedModel([call("broken", '{"x": 7}'), "recovered"])
    result = await Runner.run(Spec(tools=[broken]), "go", model)
    (res,) = results(result.transcript)
    assert res.is_error and "RuntimeError: disk on fire (7)" in res.content
    assert (result.reason, result.output) == ("completed", "recovered")


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"text": ', "not valid JSON"),
        ('{"wrong": 1}', "invalid arguments for echo"),
        ('{"text": "a", "extra": 2}', "extra"),
        ("[1, 2]", "invalid arguments"),
    ],
)
async def test_bad_arguments_give_an_error_result(arguments: str, expected: str) -> None:
    model = ScriptedModel([call("echo", arguments), "ok"])
    result = await Runner.run(Spec(tools=[echo]), "go", model)
    (res,) = results(result.transcript)
    assert res.is_error and expected in res.content
    assert result.transcript[1].tool_calls[0].arguments == arguments
    assert result.reason == "completed"


async def test_an_unknown_tool_gives_an_error_result() -> None:
    result = await Runner.run(Spec(tools=[echo]), "go", ScriptedModel([call("nope"), "ok"]))
    (res,) = results(result.transcript)
    assert res.is_error and "no tool named 'nope'" in res.content and "echo" in res.content


async def test_a_tool_timeout_gives_an_error_result() -> None:
    async def slow() -> str:
        await asyncio.sleep(3600)
        return "never"

    model = ScriptedModel([[call("slow"), call("echo", '{"text": "fast"}')], "ok"])
    result = await Runner.run(Spec(tools=[slow, echo], tool_timeout=0.05), "go", model)
    timed_out, fast = results(result.transcript)
    assert timed_out.is_error and "timed out after 0.05 s" in timed_out.content
    assert fast.content == "fast" and result.reason == "completed"


async def test_tool_calls_of_one_reply_run_concurrently_and_results_keep_call_order() -> None:
    order: list[str] = []
    both = asyncio.Barrier(2)

    async def first() -> str:
        await both.wait()  # only returns if the second runs at the same time
        await asyncio.sleep(0.01)
        order.append("first")
        return "1"

    def second() -> str:  # sync: runs in a thread
        asyncio.run_coroutine_threadsafe(both.wait(), loop).result(timeout=5)
        time.sleep(0.001)
        order.append("second")
        return "2"

    loop = asyncio.get_running_loop()
    model = ScriptedModel([[call("first"), call("second")], "ok"])
    result = await asyncio.wait_for(Runner.run(Spec(tools=[first, second]), "go", model), 10)
    assert [r.content for r in results(result.transcript)] == ["1", "2"]
    assert order == ["second", "first"]


async def test_a_model_failure_ends_the_run_failed_with_the_transcript_valid() -> None:
    session = open_session("s", MemoryStore())
    model = ScriptedModel([call("echo", '{"text": "x"}')])  # no second reply
    result = await Runner.run(Spec(tools=[echo], session=session), "go", model)
    assert result.reason == "failed"
    assert isinstance(result.error, ScriptExhausted)
    assert transcript_problems(result.transcript) == []
    assert await session.messages() == list(result.transcript)


async def test_events_reach_the_sink_and_the_iterator_in_order() -> None:
    seen: list[Event] = []
    model = ScriptedModel([call("echo", '{"text": "x"}'), "two words"])
    run = Runner.start(
        Spec(tools=[echo], session=open_session("s", MemoryStore())), "go", model, seen.append
    )
    streamed = [event async for event in run.events()]
    result = await run
    assert streamed == seen
    kinds = [type(e).__name__ for e in seen]
    assert kinds[0] == "Saved" and kinds[-2:] == ["Saved", "Ended"]
    assert [e.text for e in seen if isinstance(e, TextDelta)] == ["two ", "words"]
    assert sum(isinstance(e, ToolStarted) for e in seen) == 1
    assert sum(isinstance(e, ToolEnded) for e in seen) == 1
    assert sum(isinstance(e, Replied) for e in seen) == 2
    assert sum(isinstance(e, Saved) for e in seen) == 3
    assert isinstance(seen[-1], Ended) and seen[-1].result is result
    assert result.usage.requests == 2 and result.usage.output_tokens > 0


async def test_an_async_sink_is_awaited() -> None:
    seen: list[str] = []

    async def sink(event: Event) -> None:
        await asyncio.sleep(0)
        seen.append(type(event).__name__)

    await Runner.run(Spec(), "go", ScriptedModel(["ok"]), sink)
    assert seen[-1] == "Ended" and "Replied" in seen


async def test_steering_an_ended_run_is_a_usage_error() -> None:
    from steerable import UsageError

    run: Run = Runner.start(Spec(), "go", ScriptedModel(["ok"]))
    await run
    with pytest.raises(UsageError, match="ended"):
        run.steer("late")


async def test_a_stop_from_inside_a_tool_that_returns_at_once_stops_at_the_next_check() -> None:
    holder: list[Run] = []
    saved = open_session("s", MemoryStore())

    async def halt() -> str:
        holder[0].stop()  # from the run's own task; its cancellation must not hit the save
        return "halting"

    model = ScriptedModel([call("halt"), "never asked"])
    holder.append(Runner.start(Spec(tools=[halt], session=saved), "go", model))
    result = await holder[0]
    assert result.reason == "stopped"
    assert [r.content for r in results(result.transcript)] == ["halting"]
    assert len(model.requests) == 1
    assert await saved.messages() == list(result.transcript)


async def test_the_last_reply_s_finish_reason_is_in_the_result_and_its_event() -> None:
    cut = Reply(assistant("a reply cut sh"), finish_reason="length")
    seen: list[Event] = []
    model = ScriptedModel([call("echo", '{"text": "x"}'), cut])
    result = await Runner.run(Spec(tools=[echo]), "go", model, seen.append)
    assert result.finish_reason == "length"
    assert [e.finish_reason for e in seen if isinstance(e, Replied)] == [None, "length"]
    assert result.transcript[-1] is cut.message


async def test_the_model_s_text_deltas_are_the_run_s_events_as_they_are() -> None:
    sent = TextDelta("hello")

    class Streaming:
        name = "streaming"

        async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
            yield sent
            yield Reply(assistant("hello"))

    seen: list[Event] = []
    await Runner.run(Spec(), "go", Streaming(), seen.append)
    assert [e for e in seen if isinstance(e, TextDelta)] == [sent]
    assert next(e for e in seen if isinstance(e, TextDelta)) is sent
    assert steerable.events.TextDelta is steerable.TextDelta is steerable.models.base.TextDelta
