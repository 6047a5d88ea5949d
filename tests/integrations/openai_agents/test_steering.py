"""Steers in an OpenAI Agents SDK run, standalone: ``Runner.run`` with a SteerableSession.

The model is the SDK's own ``ScriptedModel``; what it records of each call is exactly the
input the SDK sent. The store is a SQLite file, so a steer can come from another process.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest
from agents import (
    Agent,
    GuardrailFunctionOutput,
    RunConfig,
    Runner,
    function_tool,
    handoff,
    input_guardrail,
)
from agents.extensions import handoff_filters
from agents.run_config import CallModelData, ModelInputData
from agents.testing import ScriptedModel, assistant_message, function_call

from steerable import Session, UsageError, open_session
from steerable.integrations.openai_agents import SteerableSession, steering
from steerable.stores.memory import MemoryStore
from steerable.stores.sqlite import SQLiteStore
from tests.integrations.openai_agents.support import (
    calls_then_answer,
    item_problems,
    kinds,
    stored_items,
    user_texts,
)

_STEER_FROM_ANOTHER_PROCESS = """
import asyncio, sys
from steerable import open_session
from steerable.stores.sqlite import SQLiteStore

async def main() -> None:
    async with SQLiteStore(sys.argv[1]) as store:
        await open_session("s", store).steer(sys.argv[2], id=sys.argv[3])

asyncio.run(main())
"""


async def _steer_from_another_process(path: Path, text: str, id: str) -> None:
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _STEER_FROM_ANOTHER_PROCESS, str(path), text, id
    )
    assert await child.wait() == 0


def _stored(messages: list[Any]) -> list[str]:
    return kinds(stored_items(messages))


async def test_a_steer_from_another_process_during_a_tool_call_is_in_place_once(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    guarded: list[object] = []

    @input_guardrail
    def count(ctx: Any, agent: Any, items: Any) -> GuardrailFunctionOutput:
        guarded.append(items)
        return GuardrailFunctionOutput(output_info=None, tripwire_triggered=False)

    @function_tool
    async def look(q: str) -> str:
        """Look something up."""
        if q == "first":  # the steer comes while the first call runs
            await _steer_from_another_process(path, "the blue one", "steer-1")
        return f"found {q}"

    model = ScriptedModel(calls_then_answer("first", "second"))
    agent = Agent(name="a", model=model, tools=[look], input_guardrails=[count])
    async with SQLiteStore(path) as store:
        session = SteerableSession(open_session("s", store))
        result = await Runner.run(agent, "hi", run_config=steering(session), session=session)
        stored = await open_session("s", store).messages()
        waiting = await open_session("s", store).steers()
    assert result.final_output == "done"
    first, second, third = (call.input for call in model.calls)
    assert kinds(first) == ["user:hi"]
    # the very next request: after the tool's output, once
    assert kinds(second) == [
        "user:hi",
        "function_call",
        "function_call_output",
        "user:the blue one",
    ]
    # every later request: still there, in the same place
    assert kinds(third) == [*kinds(second), "function_call", "function_call_output"]
    assert all(item_problems(call.input) == [] for call in model.calls)
    # stored in place, under the steer's id, and taken (no longer waiting)
    assert _stored(stored) == [*kinds(third), "message"]
    assert [m.id for m in stored].count("steer-1") == 1 and stored[3].steered
    assert waiting == []
    # the run went on: one run of three responses, its input guardrail ran once
    assert len(result.raw_responses) == 3 and len(guarded) == 1


async def test_the_steers_waiting_as_the_run_starts_go_into_its_first_request() -> None:
    base = open_session("s", MemoryStore())
    await base.steer("in french, please", id="early")
    model = ScriptedModel([[assistant_message("bonjour")]])
    session = SteerableSession(base)
    await Runner.run(
        Agent(name="a", model=model), "hi", run_config=steering(session), session=session
    )
    assert kinds(model.calls[0].input) == ["user:hi", "user:in french, please"]
    assert [(m.id == "early", m.steered) for m in await base.messages()][1] == (True, True)


async def test_a_steer_during_the_final_answer_waits_for_the_next_run() -> None:
    base = open_session("s", MemoryStore())
    late = ScriptedModel([[assistant_message("first answer")], [assistant_message("second")]])

    class Late(RunConfig):
        pass

    async def steer_while_answering(data: CallModelData[Any]) -> ModelInputData:
        if len(late.calls) == 0:  # the request of the final answer is going out now
            await base.steer("and in short", id="late")
        return data.model_data

    agent = Agent(name="a", model=late)
    session = SteerableSession(base)
    config = steering(session, RunConfig(call_model_input_filter=steer_while_answering))
    first = await Runner.run(agent, "hi", run_config=config, session=session)
    assert first.final_output == "first answer"
    assert [s.id for s in await base.steers()] == ["late"]  # not lost: still waiting
    await Runner.run(agent, "again", run_config=config, session=session)
    assert user_texts(late.calls[1].input) == ["hi", "again", "and in short"]
    assert [m.id for m in await base.messages()].count("late") == 1


async def test_the_users_own_filter_runs_after_the_step_on_the_input_with_the_steers() -> None:
    base = open_session("s", MemoryStore())
    await base.steer("steered", id="k")
    seen: list[list[str]] = []

    def own(data: CallModelData[Any]) -> ModelInputData:
        seen.append(kinds(data.model_data.input))
        data.model_data.instructions = "be brief"
        return data.model_data

    model = ScriptedModel([[assistant_message("ok")]])
    session = SteerableSession(base)
    config = steering(session, RunConfig(call_model_input_filter=own))
    await Runner.run(Agent(name="a", model=model), "hi", run_config=config, session=session)
    assert seen == [["user:hi", "user:steered"]]
    assert model.calls[0].system_instructions == "be brief"


async def test_an_agent_used_as_a_tool_gets_no_steer_and_its_items_are_not_stored() -> None:
    """The inner agent runs with the outer run config (so with the step): a steer sent by its
    own tool waits for the outer run's next request, and only the outer's items are stored."""
    base = open_session("s", MemoryStore())

    @function_tool
    async def poke(q: str) -> str:
        """The inner agent's tool: a steer comes while it runs."""
        await base.steer("steer during the inner tool", id="k")
        return "poked"

    inner_model = ScriptedModel(
        [
            [function_call("poke", {"q": "x"}, call_id="i1")],
            [assistant_message("inner says hi")],
        ]
    )
    inner = Agent(name="inner", model=inner_model, tools=[poke])
    tool = inner.as_tool("ask_inner", "ask the inner agent")
    outer_model = ScriptedModel(
        [
            [function_call("ask_inner", {"input": "hello"}, call_id="c2")],
            [assistant_message("outer done")],
        ]
    )
    outer = Agent(name="outer", model=outer_model, tools=[tool])
    session = SteerableSession(base)
    await Runner.run(outer, "hi", run_config=steering(session), session=session)
    # the inner run's requests: its own items only, no steer (not even after its tool)
    assert [kinds(c.input) for c in inner_model.calls] == [
        ["user:hello"],
        ["user:hello", "function_call", "function_call_output"],
    ]
    # the outer run's next request takes it, after the outer tool's output
    assert kinds(outer_model.calls[1].input) == [
        "user:hi",
        "function_call",
        "function_call_output",
        "user:steer during the inner tool",
    ]
    stored = stored_items(await base.messages())
    assert kinds(stored) == [*kinds(outer_model.calls[1].input), "message"]
    assert [i["call_id"] for i in stored if "call_id" in i] == ["c2", "c2"]  # not the inner's
    answers: list[Any] = [i for i in stored if i.get("role") == "assistant"]
    assert [a["content"][0]["text"] for a in answers] == ["outer done"]  # not the inner's


async def test_after_a_handoff_that_drops_stored_items_no_steer_is_taken() -> None:
    """A limit: ``remove_all_tools`` drops the tool items the session holds already, so the
    later requests are not the run's items plus steers; from then on the run takes none, and
    the steer taken before the handoff is stored but not in those requests."""
    base = open_session("s", MemoryStore())

    @function_tool
    async def look(q: str) -> str:
        """Look something up."""
        await base.steer(f"steer during {q}", id=q)
        return "looked"

    second_model = ScriptedModel(
        [[function_call("look", {"q": "second"}, call_id="c2")], [assistant_message("done")]]
    )
    second = Agent(name="second", model=second_model, tools=[look])
    first_model = ScriptedModel(
        [
            [function_call("look", {"q": "first"}, call_id="c0")],
            [function_call("transfer_to_second", "{}", call_id="c1")],
        ]
    )
    first = Agent(
        name="first",
        model=first_model,
        tools=[look],
        handoffs=[handoff(second, input_filter=handoff_filters.remove_all_tools)],
    )
    session = SteerableSession(base)
    result = await Runner.run(first, "hi", run_config=steering(session), session=session)
    assert result.final_output == "done"
    assert user_texts(first_model.calls[1].input) == ["hi", "steer during first"]
    assert [user_texts(c.input) for c in second_model.calls] == [["hi"], ["hi"]]
    assert [s.id for s in await base.steers()] == ["second"]  # waits for the next run
    stored = stored_items(await base.messages())
    assert item_problems(stored) == []
    assert user_texts(stored) == ["hi", "steer during first"]


def test_misuse_is_a_usage_error() -> None:
    with pytest.raises(UsageError):
        SteerableSession("s")  # type: ignore[arg-type]
    with pytest.raises(UsageError):
        steering(Session("s", MemoryStore()))  # type: ignore[arg-type]


async def test_only_at_a_step_a_steer_during_a_long_tool_waits_for_its_return() -> None:
    base = open_session("s", MemoryStore())
    waiting: list[list[str]] = []

    @function_tool
    async def look(q: str) -> str:
        """Work a while: a steer comes in the middle, the tool goes on."""
        await base.steer("meanwhile", id="k")
        for _ in range(20):  # the run's other tasks get their turns: none takes it
            await asyncio.sleep(0.01)
        waiting.append([s.id for s in await base.steers()])
        return "found"

    model = ScriptedModel(calls_then_answer("x"))
    session = SteerableSession(base)
    agent = Agent(name="a", model=model, tools=[look])
    await Runner.run(agent, "go", run_config=steering(session), session=session)
    assert waiting == [["k"]]  # still waiting as the tool returned
    assert kinds(model.calls[1].input) == [
        "user:go",
        "function_call",
        "function_call_output",
        "user:meanwhile",
    ]
