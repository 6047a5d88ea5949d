"""Live text deltas: a turn with a sink runs streamed and sends the model's text as it comes."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterable, Callable

import pytest
from pydantic_ai import Agent, RunContext
from pydantic_ai.agent import EventStreamHandler, WrapperAgent
from pydantic_ai.messages import AgentStreamEvent
from pydantic_ai.models.function import FunctionModel

from steerable import Session, transcript_problems, user
from steerable.events import Event, TextDelta
from steerable.integrations.pydantic_ai import PydanticAIAgent, history
from steerable.service import Service, Turn
from steerable.service_store import Input
from steerable.stores.memory import MemoryStore
from tests.integrations.pydantic_ai.support import Script, call, problems, say, view

ANSWER = "Rome is sunny and warm today"


def _weather_agent(script: Script) -> Agent[None, str]:
    agent = Agent(script.model)

    @agent.tool_plain
    def lookup(city: str) -> str:
        """The weather in ``city``."""
        return f"sunny in {city}"

    return agent


@pytest.mark.parametrize("live", [True, False])
async def test_the_deltas_joined_are_the_answer_and_no_sink_means_no_stream(live: bool) -> None:
    script = Script(call("lookup", "c1", '{"city": "Rome"}'), say(ANSWER))
    seen: list[tuple[str, str, Event]] = []
    sink = (lambda s, t, e: seen.append((s, t, e))) if live else None
    service = Service(MemoryStore(), PydanticAIAgent(_weather_agent(script)), poll=0.05, live=sink)
    async with service.serving():
        sent = await service.send("s", "weather?")
        done = await service.wait("s", sent.id, seconds=10)
    assert done is not None and (done.state, done.text) == ("completed", ANSWER)
    assert script.streamed == [live, live]  # streamed only for a sink: no cost without one
    if not live:
        return
    assert {(s, t) for s, t, _ in seen} == {("s", sent.id)}
    pieces = [e.text for _, _, e in seen if isinstance(e, TextDelta)]
    assert len(pieces) == 6  # a delta a word, and no tool args (the call: test_live_tools.py)
    assert "".join(pieces) == ANSWER


class _Handled(WrapperAgent[None, str]):
    """An agent with a handler of its own, as Pydantic AI's durable agents have."""

    def __init__(self, wrapped: Agent[None, str], handler: EventStreamHandler[None]) -> None:
        super().__init__(wrapped)
        self.handler = handler

    @property
    def event_stream_handler(self) -> EventStreamHandler[None]:
        """The handler a run's own ``event_stream_handler`` would replace."""
        return self.handler


async def test_the_agents_own_stream_handler_still_sees_the_events() -> None:
    script = Script(say(ANSWER))
    seen: list[AgentStreamEvent] = []

    async def own(ctx: RunContext[None], events: AsyncIterable[AgentStreamEvent]) -> None:
        async for event in events:
            seen.append(event)
            if len(seen) == 2:
                return  # leaves the rest: the deltas of it are still sent

    deltas: list[Event] = []
    agent = _Handled(Agent(script.model), own)
    outcome = await PydanticAIAgent(agent).run_turn(
        _turn(Session("s", MemoryStore()), deltas.append)
    )
    assert (outcome.state, outcome.text) == ("completed", ANSWER)
    assert len(seen) == 2
    assert "".join(e.text for e in deltas if isinstance(e, TextDelta)) == ANSWER


def _turn(session: Session, events: Callable[[Event], object] | None) -> Turn:
    return Turn(
        session="s",
        id="p",
        prompt=Input("send", "weather?", "p"),
        messages=[user("weather?", id="p")],
        store_session=session,
        resumed=False,
        steers_left=16,
        events=events,
    )


@pytest.mark.parametrize("live", [True, False])
async def test_a_steer_taken_mid_run_lands_in_place_once_with_streaming_on_or_off(
    live: bool,
) -> None:
    script = Script(call("lookup", "c1", '{"city": "Paris"}'), call("lookup", "c2"), say(ANSWER))
    agent = Agent(script.model)
    session = Session("s", MemoryStore())
    steps: list[int] = []

    @agent.tool
    async def lookup(ctx: RunContext[object], city: str = "Rome") -> str:
        """The weather in ``city``."""
        steps.append(ctx.run_step)
        if len(steps) == 1:  # the steer comes while this call runs
            await session.steer("Rome, not Paris", id="st-1")
        return "sunny"

    deltas: list[Event] = []
    outcome = await PydanticAIAgent(agent).run_turn(_turn(session, deltas.append if live else None))
    stored = await session.messages()

    assert (outcome.state, outcome.text) == ("completed", ANSWER)
    assert script.streamed == [live] * 3
    assert script.views() == [
        ["user:weather?"],
        ["user:weather?", "call:c1", "return:c1", "user:Rome, not Paris"],
        ["user:weather?", "call:c1", "return:c1", "user:Rome, not Paris", "call:c2", "return:c2"],
    ]
    assert steps == [1, 2]  # one run that went on, not restarted
    assert [(m.id, m.role, m.steered) for m in stored if m.text] == [
        ("p", "user", False),
        ("st-1", "user", True),
        (stored[-1].id, "assistant", False),
    ]
    assert [m.text for m in stored if m.text] == ["weather?", "Rome, not Paris", ANSWER]
    assert transcript_problems(stored) == []
    rebuilt = history(stored)
    assert problems(rebuilt) == []
    assert view(rebuilt) == script.views()[-1] + [f"say:{ANSWER}"]
    assert await session.steers() == []
    # the live view: the answer's text and nothing else (not the prompt, the steer, the args)
    assert "".join(e.text for e in deltas if isinstance(e, TextDelta)) == (ANSWER if live else "")
    assert len([e for e in deltas if isinstance(e, TextDelta)]) == (6 if live else 0)


async def test_a_sink_that_raises_is_logged_and_the_turn_completes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # a Turn's own sink (the service's replica guards its live= too; this is the agent's guard)
    script = Script(call("lookup", "c1", '{"city": "Rome"}'), say(ANSWER))
    calls: list[Event] = []

    def broken(event: Event) -> None:
        calls.append(event)
        raise RuntimeError("the live feed is down")

    session = Session("s", MemoryStore())
    with caplog.at_level(logging.ERROR, logger="steerable.integrations.pydantic_ai"):
        outcome = await PydanticAIAgent(_weather_agent(script)).run_turn(_turn(session, broken))
    assert (outcome.state, outcome.text) == ("completed", ANSWER)
    assert script.streamed == [True, True]
    assert len(calls) == 1  # tried once, then the turn's live view is given up, logged once
    logged = [r for r in caplog.records if r.name == "steerable.integrations.pydantic_ai"]
    assert len(logged) == 1 and "live sink raised" in logged[0].getMessage()
    stored = await session.messages()
    assert [m.text for m in stored if m.text] == ["weather?", ANSWER]
    assert transcript_problems(stored) == []


async def test_a_model_that_cannot_stream_answers_whole_and_sends_no_deltas() -> None:
    script = Script(say(ANSWER))
    function = script.model.function
    assert function is not None
    agent = Agent(FunctionModel(function))  # no stream_function
    deltas: list[Event] = []
    outcome = await PydanticAIAgent(agent).run_turn(
        _turn(Session("s", MemoryStore()), deltas.append)
    )
    assert (outcome.state, outcome.text) == ("completed", ANSWER)
    assert (script.streamed, deltas) == ([False], [])
