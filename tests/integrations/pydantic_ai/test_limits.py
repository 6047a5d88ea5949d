"""What Pydantic AI's other routes into a run's history do to the stored transcript."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic_ai import Agent, ModelRetry, RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelMessagesTypeAdapter
from pydantic_ai.models import ModelRequestContext

from steerable import Session
from steerable.integrations.pydantic_ai import Steering, history
from steerable.integrations.pydantic_ai._records import STEER_KEY
from steerable.stores.memory import MemoryStore
from tests.integrations.pydantic_ai.support import Script, call, problems, say, view


def _same(rebuilt: list[Any], ran: list[Any]) -> bool:
    """The rebuilt history is the run's, record for record (the steers' requests aside)."""

    def keep(messages: list[Any]) -> list[Any]:
        return [m for m in messages if not (m.metadata or {}).get(STEER_KEY)]

    dump = ModelMessagesTypeAdapter.dump_json
    return dump(keep(rebuilt)) == dump(keep(ran))


async def test_what_a_tool_enqueues_next_to_its_return_is_stored_in_that_request() -> None:
    session = Session("s", MemoryStore())
    script = Script(call("lookup", "c1"), say("ok"))
    agent = Agent(script.model)

    @agent.tool
    async def lookup(ctx: RunContext[object]) -> str:
        """The weather."""
        await session.steer("and wind?", id="st-1")
        ctx.enqueue("a note from the tool")
        return "sunny"

    steering = await Steering.load(session)
    result = await agent.run("weather?", capabilities=[steering])
    assert script.views()[1] == [
        "user:weather?",
        "call:c1",
        "return:c1",
        "user:a note from the tool",
        "user:and wind?",
    ]
    rebuilt = history(await session.messages())
    assert view(rebuilt) == script.views()[1] + ["say:ok"]
    assert _same(rebuilt, result.all_messages())


async def test_an_output_retry_is_stored_once_and_comes_back_once() -> None:
    session = Session("s", MemoryStore())
    script = Script(say("too short"), say("a long enough answer"), say("another long answer"))
    agent = Agent(script.model)
    checked: list[str] = []

    @agent.output_validator
    def long_enough(output: str) -> str:
        checked.append(output)
        if len(output) < 12:
            raise ModelRetry("longer, please")
        return output

    first = await Steering.load(session)
    result = await agent.run("say something", capabilities=[first])
    stored = await session.messages()
    assert view(result.all_messages()).count("retry") == 1
    assert view(history(stored)).count("retry") == 1
    assert _same(history(stored), result.all_messages())
    second = await Steering.load(session)
    await agent.run("more", message_history=second.history, capabilities=[second])
    # the next run's request has the feedback once (the model reads it as fenced user text)
    assert sum("longer, please" in part for part in script.views()[-1]) == 1
    assert len(await session.messages()) == len(stored) + 2
    assert problems(history(await session.messages())) == []


@dataclass
class Reminder(AbstractCapability[Any]):
    """Another capability that enqueues a reminder as each request goes out."""

    def __post_init__(self) -> None:
        self.sent = 0

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        self.sent += 1
        if self.sent == 2:
            ctx.enqueue("reminder: be brief")
        return request_context


async def test_what_another_capability_enqueues_at_a_request_is_stored_after_its_steers() -> None:
    session = Session("s", MemoryStore())
    script = Script(call("lookup", "c1"), say("ok"))
    agent = Agent(script.model, capabilities=[Reminder()])

    @agent.tool_plain
    async def lookup() -> str:
        """The weather."""
        await session.steer("and wind?", id="st-1")
        return "sunny"

    steering = await Steering.load(session)
    result = await agent.run("weather?", capabilities=[steering])
    asked = ["user:weather?", "call:c1", "return:c1"]
    # the model reads the reminder before the steer; the store holds it after the steer
    assert script.views()[1] == [*asked, "user:reminder: be brief", "user:and wind?"]
    stored = history(await session.messages())
    assert view(stored) == [*asked, "user:and wind?", "user:reminder: be brief", "say:ok"]
    assert view(stored).count("user:reminder: be brief") == 1  # stored, once
    assert view(result.all_messages()) == [*script.views()[1], "say:ok"]
