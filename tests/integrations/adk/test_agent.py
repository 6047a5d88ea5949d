"""ADKAgent under the service (one process, a SQLite store with the service's tables).

A steer during a tool call joins the turn at its next model call; one during the final
answer is a turn of its own; so is every steer to a workflow root (no step of ours) and one
that comes during a tool after which ADK asks the model nothing more.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from google.adk.agents import LlmAgent, SequentialAgent
from google.adk.tools.tool_context import ToolContext

from steerable.integrations.adk import ADKAgent
from steerable.messages import Message
from steerable.service import Service
from steerable.stores.sqlite import SQLiteStore
from tests.integrations.adk.scripted import ScriptedLlm, call, problems, say, texts_of


async def _transcript(service: Service, session: str) -> list[Message]:
    return [e.message for e in await service.transcript(session, limit=1000)]


async def _started(service: Service, session: str) -> list[str | None]:
    return [e.turn for e in await service.events(session, limit=1000) if e.kind == "turn_started"]


def _inputs(stored: list[Message]) -> list[tuple[str, bool]]:
    """The steerable user messages of a transcript: each input's id, and whether steered."""
    return [(m.id, m.steered) for m in stored if m.role == "user" and m.text]


async def test_a_steer_during_a_tool_call_joins_the_turn_at_its_next_model_call(
    tmp_path: Path,
) -> None:
    working, release = asyncio.Event(), asyncio.Event()

    async def work(task: str) -> str:
        """Do ``task``."""
        working.set()
        await release.wait()
        return f"{task}: done"

    model = ScriptedLlm(model="scripted", script=[call("work", "c1", task="plan"), say("planned")])
    agent = ADKAgent(LlmAgent(name="planner", model=model, tools=[work]))
    assert agent.steers_per_turn == 16
    async with SQLiteStore(tmp_path / "s.db") as store:
        service = Service(store, agent, poll=0.05)
        async with service.serving():
            sent = await service.send("s", "plan my week", id="p")
            await asyncio.wait_for(working.wait(), 30)
            steer = await service.steer("s", "skip friday", id="k")
            release.set()
            done = await service.wait("s", sent.id, seconds=30)
            fate = await service.input("s", "k")
            stored = await _transcript(service, "s")
    assert (
        steer.turn == "p"
        and done is not None
        and (done.state, done.text) == ("completed", "planned")
    )
    assert fate is not None and (fate.state, fate.turn) == ("taken", "p")
    assert [texts_of(r) for r in model.requests] == [
        ["plan my week"],
        ["plan my week", "call:c1", "result:c1", "skip friday"],
    ]
    assert _inputs(stored) == [("p", False), ("k", True)]  # each input once, under its id
    assert [m.id for m in stored].index("k") == 3  # after the call and its result


async def test_a_steer_during_the_final_answer_is_a_turn_of_its_own(tmp_path: Path) -> None:
    answering, gate = asyncio.Event(), asyncio.Event()

    async def hold(index: int) -> None:
        if index == 1:  # the first turn's final answer
            answering.set()
            await gate.wait()

    async def work(task: str) -> str:
        """Do ``task``."""
        return f"{task}: done"

    script = [call("work", "c1", task="one"), say("one done"), say("late done")]
    model = ScriptedLlm(model="scripted", script=script, hook=hold)
    async with SQLiteStore(tmp_path / "s.db") as store:
        service = Service(store, ADKAgent(LlmAgent(name="a", model=model, tools=[work])), poll=0.05)
        async with service.serving():
            first = await service.send("s", "one", id="one")
            await asyncio.wait_for(answering.wait(), 30)
            late = await service.steer("s", "too late", id="late")
            gate.set()
            await service.wait("s", "one", seconds=30)
            done = await service.wait("s", "late", seconds=30)
            started = await _started(service, "s")
            stored = await _transcript(service, "s")
    assert late.turn == first.id  # sent to the running turn, which never asked the model again
    assert done is not None and (done.state, done.text) == ("completed", "late done")
    assert started == ["one", "late"]
    assert [texts_of(r).count("too late") for r in model.requests] == [0, 0, 1]
    assert texts_of(model.requests[2]) == ["one", "call:c1", "result:c1", "one done", "too late"]
    assert [(m.id, m.steered) for m in stored if m.id in ("one", "late")] == [
        ("one", False),
        ("late", False),
    ]


@pytest.mark.filterwarnings("ignore:SequentialAgent is deprecated:DeprecationWarning")
async def test_a_workflow_root_takes_no_steer_each_is_a_turn_of_its_own(tmp_path: Path) -> None:
    working, release = asyncio.Event(), asyncio.Event()

    async def work(task: str) -> str:
        """Do ``task``."""
        if not release.is_set():
            working.set()
            await release.wait()
        return f"{task}: done"

    script = [call("work", "c1", task="one"), say("one done"), say("two done")]
    model = ScriptedLlm(model="scripted", script=script)
    step = LlmAgent(name="step", model=model, tools=[work])
    agent = ADKAgent(SequentialAgent(name="flow", sub_agents=[step]))
    assert agent.steers_per_turn == 0
    async with SQLiteStore(tmp_path / "s.db") as store:
        service = Service(store, agent, poll=0.05)
        async with service.serving():
            await service.send("s", "one", id="one")
            await asyncio.wait_for(working.wait(), 30)
            steer = await service.steer("s", "two", id="two")
            release.set()
            await service.wait("s", "one", seconds=30)
            done = await service.wait("s", "two", seconds=30)
    assert steer.turn is None  # no running turn takes it
    assert done is not None and done.text == "two done"
    assert [texts_of(r).count("two") for r in model.requests] == [0, 0, 1]
    assert all(problems(r) == [] for r in model.requests)


async def test_a_steer_during_a_tool_after_which_adk_asks_nothing_waits_for_the_next_turn(
    tmp_path: Path,
) -> None:
    working, release = asyncio.Event(), asyncio.Event()

    async def report(task: str, tool_context: ToolContext) -> str:
        """Report on ``task``; its result is the answer (the model is not asked again)."""
        tool_context.actions.skip_summarization = True
        working.set()
        await release.wait()
        return f"{task}: reported"

    model = ScriptedLlm(model="scripted", script=[call("report", "c1", task="q3"), say("next")])
    agent = ADKAgent(LlmAgent(name="a", model=model, tools=[report]))
    async with SQLiteStore(tmp_path / "s.db") as store:
        service = Service(store, agent, poll=0.05)
        async with service.serving():
            await service.send("s", "report q3", id="one")
            await asyncio.wait_for(working.wait(), 30)
            steer = await service.steer("s", "and q4", id="two")
            release.set()
            await service.wait("s", "one", seconds=30)
            done = await service.wait("s", "two", seconds=30)
            started = await _started(service, "s")
    assert steer.turn == "one"  # sent to the running turn, whose run asked the model no more
    assert done is not None and done.text == "next"
    assert started == ["one", "two"]
    assert [texts_of(r) for r in model.requests] == [
        ["report q3"],
        ["report q3", "call:c1", "result:c1", "and q4"],
    ]
