"""The SDK agent under the service: steers at its steps, late steers as turns, takeovers.

One process (a :class:`Service` over the memory store) for the turn's promises; real
processes for the rest: a run killed by SIGKILL right after the step that took a steer was
stored, and three replicas on Postgres (``scripts/service_replica.py --agent``).
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, Runner, function_tool
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

from steerable import open_session
from steerable.integrations.openai_agents import OpenAIAgentsAgent, SteerableSession, steering
from steerable.service import Service
from steerable.stores.memory import MemoryStore
from steerable.stores.sqlite import SQLiteStore
from tests.integrations.openai_agents.support import item_problems, kinds, stored_items, user_texts
from tests.service.replicas import Replicas, until

ROOT = Path(__file__).resolve().parents[3]


async def test_under_the_service_a_steer_during_a_tool_call_joins_the_next_request() -> None:
    running, release = asyncio.Event(), asyncio.Event()

    @function_tool
    async def look(q: str) -> str:
        """Look something up."""
        running.set()
        await release.wait()
        return "found"

    model = ScriptedModel(
        [[function_call("look", {"q": "x"}, call_id="c1")], [assistant_message("done")]]
    )
    service = Service(
        MemoryStore(), OpenAIAgentsAgent(Agent(name="a", model=model, tools=[look])), poll=0.05
    )
    async with service.serving():
        sent = await service.send("s", "plan my week", id="p")
        await asyncio.wait_for(running.wait(), 30)
        steer = await service.steer("s", "skip friday", id="k")
        assert steer.turn == "p"
        release.set()
        done = await service.wait("s", "p", seconds=30)
    assert done is not None and (done.state, done.text) == ("completed", "done")
    assert kinds(model.calls[1].input)[-2:] == ["function_call_output", "user:skip friday"]
    fate = await service.input("s", "k")
    assert fate is not None and (fate.state, fate.turn) == ("taken", sent.id)
    stored = [e.message for e in await service.transcript("s")]
    assert [m.id for m in stored].count("k") == 1 and [m.id for m in stored].count("p") == 1


async def test_under_the_service_a_steer_during_the_final_answer_is_a_turn_of_its_own() -> None:
    answering, release = asyncio.Event(), asyncio.Event()

    async def slow_answer(call: ModelCall) -> Any:
        answering.set()
        await release.wait()
        return [assistant_message("first answer")]

    model = ScriptedModel([ModelStep.respond(slow_answer), [assistant_message("second answer")]])
    service = Service(MemoryStore(), OpenAIAgentsAgent(Agent(name="a", model=model)), poll=0.05)
    async with service.serving():
        await service.send("s", "hi", id="p")
        await asyncio.wait_for(answering.wait(), 30)
        steer = await service.steer("s", "and in short", id="k")
        release.set()
        first = await service.wait("s", "p", seconds=30)
        second = await service.wait("s", "k", seconds=30)
    assert first is not None and first.text == "first answer"
    assert second is not None and (second.state, second.text) == ("completed", "second answer")
    assert steer.turn == "p"
    fate = await service.input("s", "k")
    assert fate is not None and (fate.state, fate.turn) == ("prompt", "k")
    assert user_texts(model.calls[1].input) == ["hi", "and in short"]


# -- SIGKILL right after the step that took a steer was stored -------------------------------

_KILLED_RUN = """
import asyncio, os, signal, sys
from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call
from steerable import open_session
from steerable.stores.sqlite import SQLiteStore
from steerable.integrations.openai_agents import SteerableSession, steering

set_tracing_disabled(True)

async def main() -> None:
    async with SQLiteStore(sys.argv[1]) as store:
        base = open_session("s", store)

        @function_tool
        async def look(q: str) -> str:
            await base.steer("the blue one", id="steer-1")
            return "found"

        @function_tool
        async def block() -> str:  # the step that took the steer is stored: die now
            os.kill(os.getpid(), signal.SIGKILL)
            return "never"

        model = ScriptedModel([
            [function_call("look", {"q": "x"}, call_id="c1")],
            [function_call("block", {}, call_id="c2")],
            [assistant_message("never")],
        ])
        agent = Agent(name="a", model=model, tools=[look, block])
        session = SteerableSession(base)
        await Runner.run(agent, "hi", run_config=steering(session), session=session)

asyncio.run(main())
"""


async def test_a_run_killed_after_its_step_took_a_steer_is_retried_with_it_once(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    child = await asyncio.create_subprocess_exec(sys.executable, "-c", _KILLED_RUN, str(path))
    assert await child.wait() == -signal.SIGKILL
    model = ScriptedModel([[assistant_message("done")]])
    async with SQLiteStore(path) as store:
        base = open_session("s", store)
        session = SteerableSession(base)
        result = await Runner.run(
            Agent(name="a", model=model), [], run_config=steering(session), session=session
        )
        stored = await base.messages()
        waiting = await base.steers()
    assert result.final_output == "done"
    retried = model.calls[0].input
    assert kinds(retried) == [
        "user:hi",
        "function_call",
        "function_call_output",
        "user:the blue one",
    ]
    assert item_problems(retried) == []
    assert [m.id for m in stored].count("steer-1") == 1 and waiting == []
    assert item_problems(stored_items(stored)) == []


# -- three replicas on Postgres ----------------------------------------------------------------


@pytest.mark.slow
async def test_three_replicas_serve_the_agent_and_a_steer_through_another_joins_the_next_step(
    postgres_url: str, tmp_path: Path
) -> None:
    agent = "tests.integrations.openai_agents.support:gated_agent"
    async with Replicas(postgres_url, tmp_path) as group:
        a, _, _ = await group.start("a", "b", "c", lease=2, calls=1, agent=agent)
        await a.call("send", session="s", text="plan my week", id="p")
        await until(lambda: _asked(group, 1), "the turn's first request")
        holder = group.requests()[0]["replica"]
        other = group.others(holder)[0]
        steer = await other.call("steer", session="s", text="skip fri", id="k")
        assert steer["turn"] == "p"
        (tmp_path / "gate-0").touch()  # only now does the tool call return: the steer waits
        await until(lambda: _answered(a), "the turn's end")
        requests = group.requests()
    assert len(requests) == 2 and {r["replica"] for r in requests} == {holder}
    second = requests[1]["items"]
    assert kinds(second)[-2:] == ["function_call_output", "user:skip fri"]
    assert item_problems(second) == []


async def _asked(group: Replicas, count: int) -> bool:
    return len(group.requests()) >= count


async def _answered(replica: Any) -> bool:
    view = await replica.call("turn", session="s", id="p")
    return view is not None and view["state"] == "completed" and bool(json.dumps(view))


@pytest.mark.slow
async def test_the_example_shows_a_steer_landing_mid_run(tmp_path: Path) -> None:
    example = ROOT / "examples" / "integrations" / "openai_agents_steering.py"
    child = await asyncio.create_subprocess_exec(
        sys.executable, str(example), str(tmp_path / "trip.db"), stdout=asyncio.subprocess.PIPE
    )
    out, _ = await child.communicate()
    assert child.returncode == 0
    lines = out.decode().splitlines()
    request = lines[
        lines.index("the second model request:") + 1 : lines.index("stored in the session:") - 1
    ]
    assert request[-2:] == [
        "  tool output: 3 flights to Lisbon: 08:10, 12:45, 19:30",
        "  user: only morning flights, please",
    ]
    assert "  user [steer]: only morning flights, please" in lines
