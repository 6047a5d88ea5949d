"""ADKAgent under the service (one process, a SQLite store with the service's tables).

A steer during a tool call joins the turn at its next model call; one during the final
answer is a turn of its own; so is every steer to a workflow root (no step of ours) and one
that comes during a tool after which ADK asks the model nothing more.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from google.adk.agents import LlmAgent, SequentialAgent
from google.adk.events.event import Event
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from steerable.events import Event as LiveEvent
from steerable.integrations.adk import ADKAgent
from steerable.integrations.adk._live import Live
from steerable.messages import Message
from steerable.models.base import TextDelta
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


class Deltas:
    """A live sink that keeps each turn's text deltas (and fails on ``fail``: a broken watcher)."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.seen: list[tuple[str, str, str]] = []

    def __call__(self, session: str, turn: str, event: LiveEvent) -> None:
        if isinstance(event, TextDelta):
            self.seen.append((session, turn, event.text))
        if self.fail:
            raise RuntimeError("the watcher went away")

    def text(self, turn: str) -> str:
        """What ``turn``'s deltas say, joined."""
        return "".join(text for _, seen, text in self.seen if seen == turn)


@pytest.mark.parametrize("live", [False, True], ids=["unwatched", "streamed"])
async def test_a_steer_during_a_tool_call_joins_the_turn_at_its_next_model_call(
    tmp_path: Path, live: bool
) -> None:
    working, release = asyncio.Event(), asyncio.Event()

    async def work(task: str) -> str:
        """Do ``task``."""
        working.set()
        await release.wait()
        return f"{task}: done"

    answer = "planned: monday to thursday"
    model = ScriptedLlm(model="scripted", script=[call("work", "c1", task="plan"), say(answer)])
    agent = ADKAgent(LlmAgent(name="planner", model=model, tools=[work]))
    assert agent.steers_per_turn == 16
    deltas = Deltas()
    async with SQLiteStore(tmp_path / "s.db") as store:
        service = Service(store, agent, poll=0.05, live=deltas if live else None)
        async with service.serving():
            sent = await service.send("s", "plan my week", id="p")
            await asyncio.wait_for(working.wait(), 30)
            steer = await service.steer("s", "skip friday", id="k")
            release.set()
            done = await service.wait("s", sent.id, seconds=30)
            fate = await service.input("s", "k")
            stored = await _transcript(service, "s")
    assert (
        steer.turn == "p" and done is not None and (done.state, done.text) == ("completed", answer)
    )
    assert fate is not None and (fate.state, fate.turn) == ("taken", "p")
    assert [texts_of(r) for r in model.requests] == [
        ["plan my week"],
        ["plan my week", "call:c1", "result:c1", "skip friday"],
    ]
    assert _inputs(stored) == [("p", False), ("k", True)]  # each input once, under its id
    assert [m.id for m in stored].index("k") == 3  # after the call and its result
    assert [m.readable for m in stored[-1:]] == [answer]  # stored whole, once, pieces or not
    if live:  # the answer arrived a word at a time, and nothing else did
        assert [text for _, _, text in deltas.seen] == ["planned: ", "monday ", "to ", "thursday"]
        assert {(s, t) for s, t, _ in deltas.seen} == {("s", "p")}


@pytest.mark.parametrize("streams", [True, False], ids=["in-pieces", "whole"])
async def test_a_watched_turn_sends_the_model_text_as_deltas_once_each(
    tmp_path: Path, streams: bool
) -> None:
    async def work(task: str) -> str:
        """Do ``task``."""
        return f"{task}: done"

    script = [call("work", "c1", task="one"), say("one done, two to go"), say("two done")]
    model = ScriptedLlm(model="scripted", script=script, streams=streams)
    deltas = Deltas()
    async with SQLiteStore(tmp_path / "s.db") as store:
        agent = ADKAgent(LlmAgent(name="a", model=model, tools=[work]))
        service = Service(store, agent, poll=0.05, live=deltas)
        async with service.serving():
            await service.send("s", "one", id="one")
            first = await service.wait("s", "one", seconds=30)
            await service.send("s", "two", id="two")
            second = await service.wait("s", "two", seconds=30)
    assert first is not None and second is not None
    assert (deltas.text("one"), deltas.text("two")) == (first.text, second.text)
    assert len(deltas.seen) == (7 if streams else 2)  # a delta a word, or the whole reply


async def test_only_the_model_text_is_a_delta_not_the_prompt_or_a_thought() -> None:
    sent: list[object] = []
    deltas = Live(sent.append)
    prompt = types.Content(role="user", parts=[types.Part(text="the prompt")])
    await deltas.see(Event(author="user", content=prompt))  # run_async(yield_user_message=True)
    thought = types.Part(text="hmm", thought=True)
    reply = types.Content(role="model", parts=[thought, types.Part(text="the answer")])
    await deltas.see(Event(author="a", content=reply))
    assert sent == [TextDelta("the answer")]


async def test_a_sink_that_raises_does_not_fail_the_turn(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model = ScriptedLlm(model="scripted", script=[call("work", "c1", task="a"), say("all done")])

    async def work(task: str) -> str:
        """Do ``task``."""
        return f"{task}: done"

    deltas = Deltas(fail=True)
    async with SQLiteStore(tmp_path / "s.db") as store:
        agent = ADKAgent(LlmAgent(name="a", model=model, tools=[work]))
        service = Service(store, agent, poll=0.05, live=deltas)
        with caplog.at_level(logging.ERROR, "steerable.integrations.adk"):
            async with service.serving():
                await service.send("s", "go", id="go")
                done = await service.wait("s", "go", seconds=30)
                stored = await _transcript(service, "s")
    assert done is not None and (done.state, done.text) == ("completed", "all done")
    assert deltas.text("go") == "all done"  # every piece was offered, each one raised
    assert [m.readable for m in stored[-1:]] == ["all done"]
    failures = [r for r in caplog.records if "live sink failed" in r.getMessage()]
    assert len(failures) == 1  # logged once, not per piece


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
