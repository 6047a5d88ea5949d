"""Live tool events: under a watched service turn each function tool call is a ToolStarted
as it starts and a ToolEnded as it ends (the model's call id, the tool's name, the call's
JSON arguments, the text the model reads), a failed call's an error; unwatched, nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from agents import Agent, RunHooks, Runner, ToolOutputText, function_tool
from agents.exceptions import AgentsException
from agents.testing import ScriptedModel, assistant_message, function_call

from steerable import open_session
from steerable.events import Event, ToolEnded, ToolStarted
from steerable.integrations.openai_agents import (
    OpenAIAgentsAgent,
    SteerableSession,
    journal_hooks,
    journaled,
    steering,
)
from steerable.messages import ToolCall, ToolResult
from steerable.models.base import TextDelta
from steerable.service import Service, Turn
from steerable.service_store import Input, Outcome, TurnView
from steerable.stores.memory import MemoryStore


async def _serve(tool: Any, name: str, *, live: bool = True) -> tuple[TurnView, list[Any], str]:
    """One served turn whose model says a word and calls ``name`` once, then answers: its
    outcome, what the sink saw (each event as (session, turn, event)) and the call's output
    as the model read it in its next request."""
    model = ScriptedModel(
        [
            [assistant_message("looking"), function_call(name, {"q": "monday"}, call_id="c1")],
            [assistant_message("done")],
        ]
    )
    seen: list[Any] = []

    def sink(session: str, turn: str, event: Event) -> None:
        seen.append((session, turn, event))

    agent = OpenAIAgentsAgent(Agent(name="a", model=model, tools=[tool]))
    service = Service(MemoryStore(), agent, poll=0.05, live=sink if live else None)
    async with service.serving():
        await service.send("s", "plan my week", id="p")
        done = await service.wait("s", "p", seconds=30)
    assert done is not None
    outputs = [
        item["output"]
        for item in model.calls[1].input
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    ]
    assert len(outputs) == 1 and isinstance(outputs[0], str)
    return done, seen, outputs[0]


def _tool_events(seen: list[Any]) -> list[Event]:
    assert all(s == "s" and t == "p" for s, t, _ in seen)
    return [e for _, _, e in seen if isinstance(e, ToolStarted | ToolEnded)]


CALL = ToolCall("c1", "look", json.dumps({"q": "monday"}, separators=(",", ":")))


async def test_a_tool_call_is_started_then_ended_with_its_result_before_the_turn_ends() -> None:
    @function_tool
    async def look(q: str) -> str:
        """Look something up."""
        return f"found {q}"

    done, seen, _ = await _serve(look, "look")
    assert (done.state, done.text) == ("completed", "done")
    assert _tool_events(seen) == [
        ToolStarted(CALL),
        ToolEnded(CALL, ToolResult("c1", "look", "found monday", False)),
    ]
    # the reply's text came before the call it made; the answer's after its result
    kinds = [type(e).__name__ for _, _, e in seen]
    assert kinds == ["TextDelta", "ToolStarted", "ToolEnded", "TextDelta"]
    assert [e.text for _, _, e in seen if isinstance(e, TextDelta)] == ["looking", "done"]


async def test_a_failing_tool_ends_as_an_error_with_the_message_the_model_reads() -> None:
    @function_tool
    async def look(q: str) -> str:
        """Look something up, and fail."""
        raise RuntimeError("the index is down")

    done, seen, read = await _serve(look, "look")
    assert done.state == "completed"
    started, ended = _tool_events(seen)
    assert started == ToolStarted(CALL)
    assert isinstance(ended, ToolEnded) and ended.call == CALL and not ended.replayed
    assert ended.result.is_error and ended.result.call_id == "c1"
    assert ended.result.content == read and read.startswith("An error occurred")


async def test_a_journaled_call_that_runs_is_neither_replayed_nor_an_error() -> None:
    @function_tool
    @journaled
    async def look(q: str) -> ToolOutputText:
        """Look something up, as a structured output."""
        return ToolOutputText(text=f"found {q}")

    _, seen, read = await _serve(look, "look")
    started, ended = _tool_events(seen)
    assert started == ToolStarted(CALL)
    assert isinstance(ended, ToolEnded) and not ended.replayed and not ended.result.is_error
    # the structured output as the model reads it
    assert ended.result.content == read and "found monday" in read


async def test_an_unwatched_turn_sends_nothing() -> None:
    @function_tool
    async def look(q: str) -> str:
        """Look something up."""
        return "found"

    done, seen, _ = await _serve(look, "look", live=False)
    assert done.state == "completed" and seen == []


class _StopAfterTheTool(RunHooks[Any]):
    """Ends the run as the tool ends (its result recorded, nothing stored after): a crash."""

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
        raise _Crash


class _Crash(AgentsException):
    """(An SDK exception: the SDK raises it as it is, not wrapped.)"""

    def __init__(self) -> None:
        super().__init__("crash")


async def test_a_journaled_call_a_watched_turn_carries_on_ends_replayed() -> None:
    runs: list[int] = []

    @function_tool
    @journaled
    async def pay(amount: int) -> str:
        """Pay ``amount``."""
        runs.append(amount)
        return f"paid {amount}"

    model = ScriptedModel(
        [[function_call("pay", {"amount": 2}, call_id="c1")], [assistant_message("paid")]]
    )
    agent = Agent(name="a", model=model, tools=[pay])
    store = MemoryStore()
    # a run that crashes as its call ends: the call's result is recorded, nothing after it
    session = SteerableSession(open_session("s", store))
    with pytest.raises(_Crash):
        await Runner.run(
            agent,
            "go",
            session=session,
            run_config=steering(session),
            hooks=journal_hooks(session, _StopAfterTheTool()),
        )
    stored = await open_session("s", store).messages()
    # a watched turn carries the call on: the journal answers it, the tool does not run
    events: list[Event] = []
    turn = Turn(
        session="s",
        id=stored[0].id,
        prompt=Input("send", "go", stored[0].id),
        messages=stored,
        store_session=open_session("s", store),
        resumed=True,
        steers_left=16,
        events=events.append,
    )
    outcome = await OpenAIAgentsAgent(agent).run_turn(turn)
    assert outcome == Outcome("completed", "paid") and runs == [2]
    call = ToolCall("c1", "pay", json.dumps({"amount": 2}, separators=(",", ":")))
    assert [e for e in events if isinstance(e, ToolStarted | ToolEnded)] == [
        ToolStarted(call),
        ToolEnded(call, ToolResult("c1", "pay", "paid 2", False), replayed=True),
    ]
