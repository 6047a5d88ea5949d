"""The other ways to run an SDK agent over a SteerableSession, and its misuse.

A streamed run, a handoff that keeps the history as it is, a history cut to the latest
items (``SessionSettings(limit=...)``), two runs on one session object at once, a run that
was given the steering config but not the session.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, function_tool
from agents.memory import SessionSettings
from agents.testing import ScriptedModel, assistant_message, function_call

from steerable import Session, UsageError, open_session
from steerable.integrations.openai_agents import SteerableSession, steering
from steerable.stores.memory import MemoryStore
from tests.integrations.openai_agents.support import (
    calls_then_answer,
    item_problems,
    kinds,
    stored_items,
    user_texts,
)


def _steering_tool(base: Session) -> Any:
    @function_tool
    async def look(q: str) -> str:
        """Look something up (a steer comes while it runs)."""
        await base.steer(f"steer during {q}", id=q)
        return f"found {q}"

    return look


async def _stored(base: Session) -> list[str]:
    items = stored_items(await base.messages())
    assert item_problems(items) == []
    return kinds(items)


async def test_a_streamed_run_takes_steers_in_place_like_a_run() -> None:
    base = open_session("s", MemoryStore())
    model = ScriptedModel(calls_then_answer("first", "second"))
    agent = Agent(name="a", model=model, tools=[_steering_tool(base)])
    session = SteerableSession(base)
    result = Runner.run_streamed(agent, "hi", run_config=steering(session), session=session)
    async for _ in result.stream_events():
        pass
    assert result.final_output == "done"
    second, third = kinds(model.calls[1].input), kinds(model.calls[2].input)
    assert second == ["user:hi", "function_call", "function_call_output", "user:steer during first"]
    assert third == [*second, "function_call", "function_call_output", "user:steer during second"]
    assert await _stored(base) == [*third, "message"]
    assert len(result.raw_responses) == 3  # one run went on, not restarted
    # a limit: the run's own result never holds a steer (the SDK's lists); the session does
    assert user_texts(result.to_input_list()) == ["hi"]


async def test_after_a_handoff_without_an_input_filter_steers_are_still_taken_in_place() -> None:
    base = open_session("s", MemoryStore())
    look = _steering_tool(base)
    second_model = ScriptedModel(calls_then_answer("second"))
    second = Agent(name="second", model=second_model, tools=[look])
    first_model = ScriptedModel(
        [
            [function_call("look", {"q": "first"}, call_id="c0")],
            [function_call("transfer_to_second", "{}", call_id="c1")],
        ]
    )
    first = Agent(name="first", model=first_model, tools=[look], handoffs=[second])
    session = SteerableSession(base)
    result = await Runner.run(first, "hi", run_config=steering(session), session=session)
    assert result.final_output == "done"
    before = ["user:hi", "function_call", "function_call_output", "user:steer during first"]
    handed = [*before, "function_call", "function_call_output"]  # the handoff's call, output
    assert kinds(first_model.calls[1].input) == before
    assert [kinds(c.input) for c in second_model.calls] == [
        handed,
        [*handed, "function_call", "function_call_output", "user:steer during second"],
    ]
    assert await _stored(base) == [*kinds(second_model.calls[1].input), "message"]
    assert await base.steers() == []


async def test_a_history_cut_to_its_latest_items_still_takes_steers_in_place() -> None:
    base = open_session("s", MemoryStore())
    model = ScriptedModel([[assistant_message("one")], *calls_then_answer("tool", answer="two")])
    agent = Agent(name="a", model=model, tools=[_steering_tool(base)])
    session = SteerableSession(base)
    await Runner.run(agent, "first", run_config=steering(session), session=session)
    await base.steer("waiting", id="early")
    limited = RunConfig(session_settings=SessionSettings(limit=1))  # the latest item only
    await Runner.run(agent, "second", run_config=steering(session, limited), session=session)
    asked = [kinds(c.input) for c in model.calls[1:]]
    assert asked == [
        ["message", "user:second", "user:waiting"],
        [
            "message",
            "user:second",
            "user:waiting",
            "function_call",
            "function_call_output",
            "user:steer during tool",
        ],
    ]
    assert await _stored(base) == ["user:first", *asked[-1], "message"]


async def test_a_cut_that_parts_a_call_from_its_output_drops_the_output_as_the_sdk_does() -> None:
    """The SDK drops such an output itself only when no session_input_callback is set, and
    steering sets one: the session drops it, and the request still takes the steer."""
    base = open_session("s", MemoryStore())
    session = SteerableSession(base)
    call = function_call("look", {"q": "x"}, call_id="c1").model_dump(exclude_unset=True)
    output = {"type": "function_call_output", "call_id": "c1", "output": "sunny"}
    answer = assistant_message("It is sunny.").model_dump(exclude_unset=True)
    history: list[Any] = [{"role": "user", "content": "weather?"}, call, output, answer]
    await session.add_items(history)
    await base.steer("and the wind?", id="k")
    model = ScriptedModel([[assistant_message("windy")]])
    limited = RunConfig(session_settings=SessionSettings(limit=2))  # the output and the answer
    agent = Agent(name="a", model=model)
    await Runner.run(agent, "tomorrow?", session=session, run_config=steering(session, limited))
    asked = list(model.calls[0].input)
    assert kinds(asked) == ["message", "user:tomorrow?", "user:and the wind?"]
    assert item_problems(asked) == []


async def test_two_runs_at_once_on_one_session_object_the_earlier_fails_clearly() -> None:
    base = open_session("s", MemoryStore())
    inside, release = asyncio.Event(), asyncio.Event()

    @function_tool
    async def wait() -> str:
        """Wait until the test lets go."""
        inside.set()
        await release.wait()
        return "waited"

    session = SteerableSession(base)
    slow = ScriptedModel([[function_call("wait", {}, call_id="c1")], [assistant_message("x")]])
    started = asyncio.create_task(
        Runner.run(
            Agent(name="slow", model=slow, tools=[wait]),
            "one",
            run_config=steering(session),
            session=session,
        )
    )
    await asyncio.wait_for(inside.wait(), 30)  # the first run is inside its tool call
    quick = Agent(name="quick", model=ScriptedModel([[assistant_message("two done")]]))
    second = await Runner.run(quick, "two", run_config=steering(session), session=session)
    release.set()
    with pytest.raises(UsageError, match="one run at a time"):
        await started
    assert second.final_output == "two done"


async def test_the_steering_config_without_the_session_in_the_run_is_a_usage_error() -> None:
    base = open_session("s", MemoryStore())
    await base.steer("never lost", id="k")
    session = SteerableSession(base)
    agent = Agent(name="a", model=ScriptedModel([[assistant_message("x")]]))
    with pytest.raises(UsageError, match="session="):
        await Runner.run(agent, "hi", run_config=steering(session))
    assert [s.id for s in await base.steers()] == ["k"]  # still waiting
