"""A watched ADK turn's tool calls, live: each call's start, then its end, before the turn's.

(A framework agent's turn sends no :class:`Ended` of its own: the turn ends when the
service records its outcome, which ``Service.wait`` returns; what the sink saw by then is
what it saw before the end.)

The service's sink sees :class:`ToolStarted` when ADK starts a call (its own id, the tool's
name, the arguments as JSON) and :class:`ToolEnded` with the response the model reads; a
tool that raises ends in an error result; a journaled call the journal answers on a
carried-on turn is ``replayed``; an unwatched turn adds no plugin.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.tools.tool_context import ToolContext as AdkToolContext

from steerable import user
from steerable.events import Event, EventSink, ToolEnded, ToolStarted
from steerable.integrations.adk import ADKAgent, journaled
from steerable.integrations.adk._live import LiveTools
from steerable.messages import Message, ToolCall, ToolResult
from steerable.models.base import TextDelta
from steerable.service import Service, Turn
from steerable.service_store import Input
from steerable.session import Session
from steerable.stores.memory import MemoryStore
from tests.integrations.adk.scripted import ScriptedLlm, call, say


def _tools(seen: list[Event]) -> list[Event]:
    return [e for e in seen if isinstance(e, (ToolStarted, ToolEnded))]


async def _serve(agent: ADKAgent) -> tuple[list[Event], Any]:
    seen: list[Event] = []
    service = Service(MemoryStore(), agent, poll=0.05, live=lambda s, t, e: seen.append(e))
    async with service.serving():
        sent = await service.send("s", "weather?", id="p")
        done = await service.wait("s", sent.id, seconds=30)
        before_the_end = list(seen)  # what the sink saw by the time the turn ended
    return before_the_end, done


async def test_a_watched_turn_sends_each_tool_call_start_then_its_result_before_the_end() -> None:
    async def lookup(city: str) -> str:
        """The weather in ``city``."""
        return f"sunny in {city}"

    model = ScriptedLlm(model="scripted", script=[call("lookup", "c1", city="Rome"), say("sunny")])
    seen, done = await _serve(ADKAgent(LlmAgent(name="a", model=model, tools=[lookup])))
    assert done is not None and (done.state, done.text) == ("completed", "sunny")
    started = ToolCall("c1", "lookup", '{"city": "Rome"}')
    result = ToolResult("c1", "lookup", json.dumps({"result": "sunny in Rome"}), False)
    assert _tools(seen) == [ToolStarted(started), ToolEnded(started, result, replayed=False)]
    # the call's end came before the answer's text, which came a word at a time
    assert [type(e) for e in seen] == [ToolStarted, ToolEnded, TextDelta]


async def test_a_tool_that_raises_ends_in_an_error_result_before_the_failed_turn_ends() -> None:
    async def lookup(city: str) -> str:
        """The weather in ``city``."""
        raise RuntimeError(f"no weather for {city}")

    model = ScriptedLlm(model="scripted", script=[call("lookup", "c1", city="Oz"), say("never")])
    seen, done = await _serve(ADKAgent(LlmAgent(name="a", model=model, tools=[lookup])))
    assert done is not None and done.state == "failed"
    started = ToolCall("c1", "lookup", '{"city": "Oz"}')
    error = ToolResult("c1", "lookup", "RuntimeError: no weather for Oz", True)
    assert _tools(seen) == [ToolStarted(started), ToolEnded(started, error)]


async def test_an_error_callback_answer_is_the_error_result_the_model_reads() -> None:
    async def lookup(city: str) -> str:
        """The weather in ``city``."""
        raise RuntimeError("down")

    async def answer(tool: Any, args: Any, tool_context: Any, error: Exception) -> dict[str, str]:
        return {"error": f"{tool.name} failed: {error}"}

    model = ScriptedLlm(model="scripted", script=[call("lookup", "c1", city="Oz"), say("sorry")])
    agent = LlmAgent(name="a", model=model, tools=[lookup], on_tool_error_callback=answer)
    seen, done = await _serve(ADKAgent(agent))
    assert done is not None and (done.state, done.text) == ("completed", "sorry")
    ended = [e for e in seen if isinstance(e, ToolEnded)]
    assert [(e.result.content, e.result.is_error) for e in ended] == [
        ('{"error": "lookup failed: down"}', True)
    ]


def _turn(
    session: Session, messages: list[Message], resumed: bool, events: EventSink | None
) -> Turn:
    return Turn(
        session="s",
        id="p",
        prompt=Input("send", "pay", "p"),
        messages=messages,
        store_session=session,
        resumed=resumed,
        steers_left=16,
        events=events,
    )


@pytest.mark.filterwarnings(r"ignore:\[EXPERIMENTAL\] ResumabilityConfig:UserWarning")
async def test_a_carried_on_turn_whose_journal_answers_the_call_sends_it_replayed() -> None:
    ran: list[int] = []
    recorded = asyncio.Event()

    @journaled
    async def pay(amount: int) -> dict[str, int]:
        """Pay ``amount``."""
        ran.append(amount)
        return {"paid": amount}

    async def die_once(
        tool: Any, args: dict[str, Any], tool_context: AdkToolContext, tool_response: Any
    ) -> None:
        if not recorded.is_set():
            recorded.set()  # the result is recorded; the process dies here
            await asyncio.Event().wait()

    def agent(script: list[Any]) -> ADKAgent:
        model = ScriptedLlm(model="scripted", script=script)
        return ADKAgent(
            LlmAgent(name="payer", model=model, tools=[pay], after_tool_callback=die_once)
        )

    session = Session("s", MemoryStore())
    first: list[Event] = []
    dying = asyncio.create_task(
        agent([call("pay", "c1", amount=5)]).run_turn(
            _turn(session, [user("pay", id="p")], False, first.append)
        )
    )
    await asyncio.wait_for(recorded.wait(), 10)
    dying.cancel()  # as a SIGKILL: nothing more of the run is stored
    await asyncio.gather(dying, return_exceptions=True)
    assert [type(e) for e in first] == [ToolStarted]
    carried: list[Event] = []
    stored = await session.messages()
    outcome = await agent([say("paid")]).run_turn(_turn(session, stored, True, carried.append))
    assert (outcome.state, outcome.text, ran) == ("completed", "paid", [5])
    started = ToolCall("c1", "pay", '{"amount": 5}')
    result = ToolResult("c1", "pay", json.dumps({"paid": 5}), False)
    assert _tools(carried) == [ToolStarted(started), ToolEnded(started, result, replayed=True)]


async def test_an_unwatched_turn_runs_no_live_plugin() -> None:
    plugins: list[list[str]] = []

    async def lookup(city: str, tool_context: AdkToolContext) -> str:
        """The weather in ``city``."""
        manager = tool_context._invocation_context.plugin_manager
        plugins.append([type(p).__name__ for p in manager.plugins])
        return "sunny"

    watched: list[Event] = []
    sinks: list[EventSink | None] = [None, watched.append]
    for events in sinks:
        model = ScriptedLlm(model="scripted", script=[call("lookup", "c1", city="Rome"), say("ok")])
        agent = ADKAgent(LlmAgent(name="a", model=model, tools=[lookup]))
        turn = _turn(Session("s", MemoryStore()), [user("pay", id="p")], False, events)
        await agent.run_turn(turn)
    assert [LiveTools.__name__ in names for names in plugins] == [False, True]
    assert [type(e) for e in watched][:2] == [ToolStarted, ToolEnded]
