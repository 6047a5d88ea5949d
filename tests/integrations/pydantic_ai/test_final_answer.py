"""A steer sent while the model writes its final answer is not lost."""

from __future__ import annotations

import asyncio

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse

from steerable import Session
from steerable.integrations.pydantic_ai import PydanticAIAgent, Steering
from steerable.service import Service
from steerable.stores.memory import MemoryStore
from tests.integrations.pydantic_ai.support import Script, call, say


async def test_standalone_it_waits_for_the_next_run_and_is_taken_at_its_first_request() -> None:
    session = Session("s", MemoryStore())

    async def answer_while_steered(messages: list[ModelMessage]) -> ModelResponse:
        await session.steer("and tomorrow?", id="late")  # the model is writing the answer
        return say("sunny today")

    script = Script(call("lookup", "c1"), answer_while_steered, say("rain tomorrow"))
    agent = Agent(script.model)

    @agent.tool_plain
    def lookup() -> str:
        """The weather."""
        return "sunny"

    first = await Steering.load(session)
    await agent.run("weather?", message_history=first.history or None, capabilities=[first])
    assert first.taken == []
    assert [s.id for s in await session.steers()] == ["late"]  # waiting, not lost
    assert all(m.id != "late" for m in await session.messages())

    second = await Steering.load(session)
    result = await agent.run("thanks", message_history=second.history, capabilities=[second])
    assert result.output == "rain tomorrow"
    assert script.views()[-1][-2:] == ["user:thanks", "user:and tomorrow?"]
    stored = await session.messages()
    assert [m.id for m in stored if m.steered] == ["late"]
    assert [m.text for m in stored][-3:] == ["thanks", "and tomorrow?", "rain tomorrow"]
    assert await session.steers() == []


async def test_under_the_service_it_becomes_a_turn_of_its_own() -> None:
    answering, gate = asyncio.Event(), asyncio.Event()

    async def slow_answer(messages: list[ModelMessage]) -> ModelResponse:
        answering.set()
        await gate.wait()
        return say("sunny today")

    script = Script(call("lookup", "c1"), slow_answer, say("rain tomorrow"))
    agent = Agent(script.model)

    @agent.tool_plain
    def lookup() -> str:
        """The weather."""
        return "sunny"

    store = MemoryStore()
    service = Service(store, PydanticAIAgent(agent), poll=0.05)
    async with service.serving():
        first = await service.send("s", "weather?")
        await answering.wait()
        late = await service.steer("s", "and tomorrow?")
        assert late.turn == first.id  # offered to the running turn, which has no step left
        gate.set()
        turn = await service.wait("s", first.id, seconds=10)
        for _ in range(400):  # the steer's own turn starts once the first has ended
            if (done := await service.wait("s", late.id, seconds=10)) is not None:
                break
            await asyncio.sleep(0.025)
    assert turn is not None and (turn.state, turn.text) == ("completed", "sunny today")
    assert done is not None and (done.state, done.text) == ("completed", "rain tomorrow")
    assert script.views()[-1][-2:] == ["say:sunny today", "user:and tomorrow?"]
    stored = await store.messages("s")
    assert [(m.id, m.steered) for m in stored if m.text == "and tomorrow?"] == [(late.id, False)]
