"""One store write per step: the items the runner hands over wait for the next step.

The runner hands a turn's items to the session right before its next request; the step of
that request stores them and takes the steers in one save. A run's end is stored at once
(the answer), or by ``flush`` (the service's agent flushes as each turn ends).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from agents import Agent, Runner, function_tool
from agents.testing import ScriptedModel, function_call

from steerable import Message, open_session, transcript_problems
from steerable.integrations.openai_agents import OpenAIAgentsAgent, SteerableSession, steering
from steerable.service import Service
from steerable.store import Steer, Store
from steerable.stores.memory import MemoryStore
from tests.integrations.openai_agents.support import calls_then_answer, kinds, stored_items


@dataclass
class CountingStore:
    """``inner``, with each write kept in :attr:`writes`: (messages stored, steers taken)."""

    inner: Store
    writes: list[tuple[int, int]] = field(default_factory=list)

    async def messages(self, session: str) -> list[Message]:
        """The inner store's transcript."""
        return await self.inner.messages(session)

    async def save(
        self, session: str, messages: Sequence[Message], *, at: int, take: int = 0
    ) -> list[Message]:
        """The inner store's save, counted."""
        taken = await self.inner.save(session, messages, at=at, take=take)
        self.writes.append((len(messages), len(taken)))
        return taken

    async def steer(self, session: str, steer: Steer) -> None:
        """The inner store's steer (a client's write, not the run's: not counted)."""
        await self.inner.steer(session, steer)

    async def take_steers(self, session: str, *, at: int | None, limit: int) -> list[Message]:
        """The inner store's take, counted."""
        taken = await self.inner.take_steers(session, at=at, limit=limit)
        self.writes.append((0, len(taken)))
        return taken

    async def steers(self, session: str) -> list[Steer]:
        """The inner store's waiting steers."""
        return await self.inner.steers(session)


async def test_each_step_is_one_write_and_the_answer_one_more() -> None:
    store = CountingStore(MemoryStore())
    base = open_session("s", store)

    @function_tool
    async def look(q: str) -> str:
        """Look something up (a steer comes while the first call runs)."""
        if q == "first":
            await base.steer("the blue one", id="k")
        return f"found {q}"

    model = ScriptedModel(calls_then_answer("first", "second"))
    session = SteerableSession(base)
    agent = Agent(name="a", model=model, tools=[look])
    await Runner.run(agent, "hi", run_config=steering(session), session=session)
    # three requests, three writes: the prompt; a call, its output (and the steer taken);
    # a call and its output. Then the answer, taking no steer.
    assert store.writes == [(1, 0), (2, 1), (2, 0), (1, 0)]
    stored = await base.messages()
    assert transcript_problems(stored) == []
    assert kinds(stored_items(stored))[3] == "user:the blue one"


async def test_under_the_service_a_turn_that_ends_at_max_turns_stores_its_last_items() -> None:
    """The last turn's call and output come after the last step: the agent flushes them."""
    store = MemoryStore()

    @function_tool
    async def look(q: str) -> str:
        """Look something up."""
        return f"found {q}"

    model = ScriptedModel([[function_call("look", {"q": "x"}, call_id="c1")]])
    agent = OpenAIAgentsAgent(Agent(name="a", model=model, tools=[look]), max_turns=1)
    service = Service(store, agent, poll=0.05)
    async with service.serving():
        await service.send("s", "hi", id="p")
        done = await service.wait("s", "p", seconds=30)
        stored = [e.message for e in await service.transcript("s")]
    assert done is not None and done.state == "max_steps"
    assert kinds(stored_items(stored)) == ["user:hi", "function_call", "function_call_output"]
    assert transcript_problems(stored) == []
