"""Live text deltas: with an event sink the turn is a streamed run, and nothing else changes.

The SDK's ``ScriptedModel`` streams as a provider does: a delta for each text part of an
assistant message, argument deltas for a function call. A reply in three text parts gives
three deltas; the call before it must give none.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any

import pytest
from agents import Agent, function_tool
from agents.testing import ScriptedModel, function_call
from openai.types.responses import (
    ResponseOutputMessage,
    ResponseOutputRefusal,
    ResponseOutputText,
)

from steerable import Message, Session, user
from steerable.events import Event, ToolStarted
from steerable.integrations.openai_agents import OpenAIAgentsAgent
from steerable.models.base import TextDelta
from steerable.service import Service, Turn
from steerable.service_store import Input, Outcome
from steerable.stores.memory import MemoryStore
from tests.integrations.openai_agents.support import item_problems, kinds, stored_items

PIECES = ["Mon", "day is ", "free"]


def _answer(*pieces: str) -> ResponseOutputMessage:
    """An assistant message in ``pieces``, one text part (so one streamed delta) each."""
    parts: list[ResponseOutputText | ResponseOutputRefusal] = [
        ResponseOutputText(text=p, type="output_text", annotations=[]) for p in pieces
    ]
    return ResponseOutputMessage(
        id="answer", type="message", role="assistant", status="completed", content=parts
    )


@dataclass
class Served:
    """What one served turn gave: its outcome, the stored transcript, the model's calls."""

    outcome: Any
    stored: list[Message]
    model: ScriptedModel
    deltas: list[tuple[str, str, str]] = field(default_factory=list)


async def _serve_with_a_steer(live: bool) -> Served:
    """A turn that calls a tool, gets a steer during it, then answers in three pieces."""
    running, release = asyncio.Event(), asyncio.Event()

    @function_tool
    async def look(q: str) -> str:
        """Look something up."""
        running.set()
        await release.wait()
        return "found"

    model = ScriptedModel(
        [[function_call("look", {"q": "monday"}, call_id="c1")], [_answer(*PIECES)]]
    )
    deltas: list[tuple[str, str, str]] = []

    def sink(session: str, turn: str, event: Event) -> None:
        if isinstance(event, TextDelta):  # the tool's events: test_live_tools
            deltas.append((session, turn, event.text))

    agent = OpenAIAgentsAgent(Agent(name="a", model=model, tools=[look]))
    service = Service(MemoryStore(), agent, poll=0.05, live=sink if live else None)
    async with service.serving():
        await service.send("s", "plan my week", id="p")
        await asyncio.wait_for(running.wait(), 30)
        steer = await service.steer("s", "skip friday", id="k")
        assert steer.turn == "p"
        release.set()
        done = await service.wait("s", "p", seconds=30)
        fate = await service.input("s", "k")
        stored = [e.message for e in await service.transcript("s")]
    assert fate is not None and (fate.state, fate.turn) == ("taken", "p")
    return Served(done, stored, model, deltas)


async def test_under_the_service_the_deltas_join_to_the_answer_and_the_steer_lands_in_place() -> (
    None
):
    streamed = await _serve_with_a_steer(live=True)
    done = streamed.outcome
    assert done is not None and (done.state, done.text) == ("completed", "".join(PIECES))
    # each piece as the model streamed it, for this session and turn; the call gave none
    assert streamed.deltas == [("s", "p", piece) for piece in PIECES]
    assert [call.streamed for call in streamed.model.calls] == [True, True]
    second = streamed.model.calls[1].input
    assert kinds(second)[-2:] == ["function_call_output", "user:skip friday"]
    ids = [m.id for m in streamed.stored]
    assert ids.count("k") == 1 and ids.count("p") == 1
    assert item_problems(stored_items(streamed.stored)) == []
    # nothing else changes: the requests and what is stored are those of the plain run
    plain = await _serve_with_a_steer(live=False)
    assert [call.streamed for call in plain.model.calls] == [False, False]
    assert [c.input for c in streamed.model.calls] == [c.input for c in plain.model.calls]
    assert _shape(streamed.stored) == _shape(plain.stored)
    untimed = {"started_at": None, "ended_at": None}
    assert dataclasses.replace(plain.outcome, **untimed) == dataclasses.replace(done, **untimed)


def _shape(stored: list[Message]) -> list[tuple[object, ...]]:
    """Each stored message as its role, steered flag and parts, and its id when an input's
    (the ids of the framework's records are made fresh each run)."""
    return [(m.role, m.id if m.id in ("p", "k") else "", m.steered, m.parts) for m in stored]


def _turn(events: Any) -> Turn:
    """A turn built by hand over a memory store, its prompt at the end of its messages."""
    return Turn(
        session="s",
        id="p",
        prompt=Input("send", "go", "p"),
        messages=[user("go", id="p")],
        store_session=Session("s", MemoryStore()),
        resumed=False,
        steers_left=16,
        events=events,
    )


async def test_a_sink_that_raises_does_not_fail_the_turn(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[str] = []

    def broken(event: Event) -> None:
        assert isinstance(event, TextDelta)
        calls.append(event.text)
        raise RuntimeError("the client went away")

    model = ScriptedModel([[_answer(*PIECES)]])
    turn = _turn(broken)
    with caplog.at_level(logging.WARNING, "steerable.integrations.openai_agents"):
        outcome = await OpenAIAgentsAgent(Agent(name="a", model=model)).run_turn(turn)
    assert outcome == Outcome("completed", "".join(PIECES))
    assert calls == PIECES  # a failed delta does not stop the next one
    assert len(caplog.records) == 1  # logged once for the turn, not once a delta
    stored = await turn.store_session.messages()
    assert stored[0].id == "p" and stored[-1].readable == "".join(PIECES)


async def test_a_stop_during_a_streamed_turn_cancels_the_sdk_run_and_waits_for_it() -> None:
    running, cancelled = asyncio.Event(), asyncio.Event()

    @function_tool
    async def look(q: str) -> str:
        """Look something up, until cancelled."""
        running.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            for _ in range(5):  # a cleanup that takes a few rounds of the loop
                await asyncio.sleep(0)
            cancelled.set()
            raise
        return "never"

    model = ScriptedModel([[function_call("look", {"q": "x"}, call_id="c1")], [_answer("no")]])
    events: list[Event] = []
    turn = _turn(events.append)
    agent = OpenAIAgentsAgent(Agent(name="a", model=model, tools=[look]))
    task = asyncio.create_task(agent.run_turn(turn))
    await asyncio.wait_for(running.wait(), 30)
    turn.request_stop()
    outcome = await asyncio.wait_for(task, 30)
    assert outcome == Outcome("stopped")
    # the SDK's run loop (a task of its own) was cancelled before the turn ended, not left on
    assert cancelled.is_set()
    # the call started and never ended; the model gave no text
    assert [type(e) for e in events] == [ToolStarted] and len(model.calls) == 1
