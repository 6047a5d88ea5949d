"""Pydantic AI takes a steer at its next model request, in place, once; the run goes on."""

from __future__ import annotations

import asyncio
from pathlib import Path

from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessagesTypeAdapter

from steerable import Session, transcript_problems
from steerable.integrations.pydantic_ai import Steering, history
from steerable.integrations.pydantic_ai._records import STEER_KEY
from steerable.stores.sqlite import SQLiteStore
from tests.integrations.pydantic_ai.support import (
    Script,
    call,
    problems,
    say,
    steer_from_another_process,
    view,
)


async def test_a_steer_sent_during_a_tool_call_is_in_the_next_request_once_in_place(
    tmp_path: Path,
) -> None:
    path = tmp_path / "pa.db"
    script = Script(call("lookup", "c1"), call("lookup", "c2"), say("Rome is sunny"))
    agent = Agent(script.model, instructions="Answer briefly.")
    steps: list[int] = []

    @agent.tool
    async def lookup(ctx: RunContext[object]) -> str:
        """The weather."""
        steps.append(ctx.run_step)
        if len(steps) == 1:  # the steer comes from elsewhere while this call runs
            await steer_from_another_process(path, "s", "Rome, not Paris", "st-1")
        return "sunny"

    async with SQLiteStore(path) as store:
        session = Session("s", store)
        steering = await Steering.load(session)
        result = await agent.run(
            "weather?", message_history=steering.history or None, capabilities=[steering]
        )
        stored = await session.messages()

    assert result.output == "Rome is sunny"
    # the very next request has it right after the tool's return, once; every later one too
    assert script.views() == [
        ["user:weather?"],
        ["user:weather?", "call:c1", "return:c1", "user:Rome, not Paris"],
        ["user:weather?", "call:c1", "return:c1", "user:Rome, not Paris", "call:c2", "return:c2"],
    ]
    # not restarted: one run, its steps went on (a restart would ask again from the prompt)
    assert steps == [1, 2]
    assert result.usage.requests == 3
    # stored in place, once, as a steered user message under the steer's id
    assert [(m.role, m.steered, m.text) for m in stored] == [
        ("user", False, "weather?"),
        ("assistant", False, ""),
        ("user", False, ""),
        ("user", True, "Rome, not Paris"),
        ("assistant", False, ""),
        ("user", False, ""),
        ("assistant", False, "Rome is sunny"),
    ]
    assert [m.id for m in stored if m.steered] == ["st-1"]
    assert transcript_problems(stored) == []
    # the history rebuilt from the store is the run's, the steer in it once, in place
    rebuilt = history(stored)
    assert [type(m) for m in rebuilt] == [type(m) for m in result.all_messages()]
    assert problems(rebuilt) == []
    assert view(rebuilt) == script.views()[-1] + ["say:Rome is sunny"]
    # and verbatim: every record but the steer's is the run's own message, as serialised
    ran = [m for m in result.all_messages() if not (m.metadata or {}).get(STEER_KEY)]
    kept = [m for m in rebuilt if not (m.metadata or {}).get(STEER_KEY)]
    assert ModelMessagesTypeAdapter.dump_json(kept) == ModelMessagesTypeAdapter.dump_json(ran)


async def test_only_at_a_step_a_steer_during_a_long_tool_waits_for_its_return() -> None:
    from steerable.stores.memory import MemoryStore

    script = Script(call("lookup", "c1"), say("done"))
    agent = Agent(script.model)
    session = Session("s", MemoryStore())
    waiting: list[list[str]] = []

    @agent.tool_plain
    async def lookup() -> str:
        """Work a while: a steer comes in the middle, the tool goes on."""
        await session.steer("meanwhile", id="k")
        for _ in range(20):  # the run's other tasks get their turns: none takes it
            await asyncio.sleep(0.01)
        waiting.append([s.id for s in await session.steers()])
        return "found"

    steering = await Steering.load(session)
    await agent.run("go", capabilities=[steering])
    assert waiting == [["k"]]  # still waiting as the tool returned
    assert script.views()[1] == ["user:go", "call:c1", "return:c1", "user:meanwhile"]
