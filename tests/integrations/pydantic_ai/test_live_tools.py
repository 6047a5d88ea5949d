"""Live tool events: a turn with a sink is sent each tool call as it starts and as it ends."""

from __future__ import annotations

import pytest
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.exceptions import ToolFailed
from pydantic_ai.messages import ModelRequest, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import FunctionModel

from steerable import Session, user
from steerable.events import Event, EventSink, TextDelta, ToolEnded, ToolStarted
from steerable.integrations.pydantic_ai import PydanticAIAgent, journaled
from steerable.integrations.pydantic_ai._records import record
from steerable.journal import call_key
from steerable.messages import ToolCall, ToolResult
from steerable.service import Service, Turn
from steerable.service_store import Input
from steerable.stores.memory import MemoryStore
from tests.integrations.pydantic_ai.support import Script, call, say

ANSWER = "Rome is sunny"
ROME = '{"city":"Rome"}'


def _agent(script: Script | FunctionModel) -> Agent[None, str]:
    agent = Agent(script.model if isinstance(script, Script) else script)

    @agent.tool_plain
    def lookup(city: str) -> dict[str, str]:
        """The weather in ``city``."""
        return {"city": city, "sky": "sunny"}

    @agent.tool_plain
    def forecast(city: str) -> str:
        """Tomorrow's weather in ``city``."""
        raise ModelRetry(f"no forecast for {city}, ask for today's")

    @agent.tool_plain
    def alerts(city: str) -> str:
        """The weather alerts in ``city``."""
        raise ToolFailed(f"the alerts service for {city} is down")

    return agent


async def _served(script: Script, *, live: bool = True) -> list[Event]:
    """The events the service's sink saw for one turn, by the time the turn ended."""
    seen: list[Event] = []
    sink = (lambda s, t, e: seen.append(e)) if live else None
    service = Service(MemoryStore(), PydanticAIAgent(_agent(script)), poll=0.05, live=sink)
    async with service.serving():
        sent = await service.send("s", "weather?")
        done = await service.wait("s", sent.id, seconds=10)
    assert done is not None and (done.state, done.text) == ("completed", ANSWER)
    return seen


def _tools(seen: list[Event]) -> list[Event]:
    return [e for e in seen if isinstance(e, ToolStarted | ToolEnded)]


async def test_a_tool_call_is_sent_as_it_starts_then_as_it_ends_before_the_turn_ends() -> None:
    seen = await _served(Script(call("lookup", "c1", ROME), say(ANSWER)))
    lookup = ToolCall("c1", "lookup", ROME)
    result = ToolResult("c1", "lookup", '{"city":"Rome","sky":"sunny"}', False)  # the model's text
    assert _tools(seen) == [ToolStarted(lookup), ToolEnded(lookup, result, replayed=False)]
    # the call's two events first, then the answer's text; all seen by the time the turn ended
    assert [type(e) for e in seen] == [ToolStarted, ToolEnded] + [TextDelta] * 3
    assert "".join(e.text for e in seen if isinstance(e, TextDelta)) == ANSWER


async def test_no_sink_means_no_tool_hook() -> None:
    script = Script(call("lookup", "c1", ROME), say(ANSWER))
    assert await _served(script, live=False) == []
    assert script.streamed == [False, False]


@pytest.mark.parametrize(
    ("tool", "text"),
    [
        ("forecast", "no forecast for Rome, ask for today's"),
        ("alerts", '{"error":"the alerts service for Rome is down"}'),
    ],
)
async def test_a_failing_tool_ends_with_is_error_and_the_text_the_model_reads(
    tool: str, text: str
) -> None:
    script = Script(call(tool, "c1", ROME), say(ANSWER))
    seen = await _served(script)
    started, ended = _tools(seen)
    assert started == ToolStarted(ToolCall("c1", tool, ROME))
    assert isinstance(ended, ToolEnded) and ended.call == started.call
    assert (ended.result.call_id, ended.result.name, ended.result.is_error) == ("c1", tool, True)
    assert text in ended.result.content
    # what the model read for the call is what was sent
    (sent_back,) = [p for p in script.requests[1][-1].parts if isinstance(p, ToolReturnPart)]
    assert (sent_back.tool_call_id, sent_back.model_response_str()) == ("c1", ended.result.content)


async def test_a_model_that_cannot_stream_still_sends_tool_events() -> None:
    script = Script(call("lookup", "c1", ROME), say(ANSWER))
    assert script.model.function is not None
    events: list[Event] = []
    session = Session("s", MemoryStore())
    agent = PydanticAIAgent(_agent(FunctionModel(script.model.function)))
    outcome = await agent.run_turn(_turn(session, events.append, resumed=False))
    assert (outcome.state, outcome.text) == ("completed", ANSWER)
    assert [type(e) for e in events] == [ToolStarted, ToolEnded]
    assert script.streamed == [False, False]


def _turn(session: Session, sink: EventSink, *, resumed: bool) -> Turn:
    return Turn(
        session="s",
        id="p",
        prompt=Input("send", "pay", "p"),
        messages=[user("pay", id="p")],
        store_session=session,
        resumed=resumed,
        steers_left=16,
        events=sink,
    )


async def test_a_journaled_call_answered_from_the_journal_ends_replayed() -> None:
    runs: list[int] = []

    @journaled
    async def pay(amount: int) -> str:
        """Pay ``amount``."""
        runs.append(amount)
        return f"paid {amount}"

    session = Session("s", MemoryStore())
    # what a turn that stored the reply, ran the call and recorded it, then died, left
    reply = record(call("pay", "p1", '{"amount":5}'))
    prompt = record(ModelRequest(parts=[UserPromptPart("pay")]), id="p", prompt=True)
    await session.save([prompt, reply])
    key = call_key("s", f"pydantic_ai/{reply.id}", "p1")
    await session.begin_calls([key])
    await session.end_call(key, ToolResult("p1", "pay", "paid 5"))

    script = Script(say("done"), call("pay", "p2", '{"amount":7}'), say("done again"))
    agent = Agent(script.model, tools=[pay])
    events: list[Event] = []
    outcome = await PydanticAIAgent(agent).run_turn(_turn(session, events.append, resumed=True))
    assert (outcome.state, outcome.text) == ("completed", "done")
    assert runs == []  # the journal answered it
    p1 = ToolCall("p1", "pay", '{"amount":5}')
    assert _tools(events) == [
        ToolStarted(p1),
        ToolEnded(p1, ToolResult("p1", "pay", "paid 5"), replayed=True),
    ]

    # a call that runs now is not replayed
    events.clear()
    second = Turn(
        session="s",
        id="q",
        prompt=Input("send", "pay 7", "q"),
        messages=[*await session.messages(), user("pay 7", id="q")],
        store_session=session,
        resumed=False,
        steers_left=16,
        events=events.append,
    )
    outcome = await PydanticAIAgent(agent).run_turn(second)
    assert (outcome.state, outcome.text) == ("completed", "done again")
    assert runs == [7]
    p2 = ToolCall("p2", "pay", '{"amount":7}')
    assert _tools(events) == [
        ToolStarted(p2),
        ToolEnded(p2, ToolResult("p2", "pay", "paid 7"), replayed=False),
    ]
