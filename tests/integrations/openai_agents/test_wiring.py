"""The two halves a steered run is given, ``session=`` and ``run_config=steering(session)``:
either one alone is refused at once, never silent, and loses nothing.

- The config without its session (none, or another object) fails as the run starts or at
  its first request, storing nothing.
- The session without the config is the SDK's plain run; it stores everything, but where a
  steered run would take a waiting steer (the run's input, a turn's tool outputs) it fails
  with a UsageError naming ``steering(session)``, after storing what it was handed. The
  retry with both, ``Runner.run(agent, [], ...)``, takes the steer in place and redoes nothing.
"""

from __future__ import annotations

import pytest
from agents import Agent, Runner, function_tool
from agents.testing import ScriptedModel, assistant_message

from steerable import Store, UsageError, open_session
from steerable.integrations.openai_agents import SteerableSession, steering
from steerable.stores.memory import MemoryStore
from tests.integrations.openai_agents.support import calls_then_answer, kinds, stored_items


async def _stored(store: Store) -> list[str]:
    return kinds(stored_items(await open_session("s", store).messages()))


async def test_the_config_of_another_session_object_is_refused_as_the_run_starts() -> None:
    store = MemoryStore()
    mine, other = (SteerableSession(open_session("s", store)) for _ in range(2))
    model = ScriptedModel([[assistant_message("x")]])
    with pytest.raises(UsageError, match="session=<the same SteerableSession>"):
        await Runner.run(
            Agent(name="a", model=model), "hi", session=mine, run_config=steering(other)
        )
    assert list(model.calls) == []  # refused before any request
    assert await _stored(store) == []


async def test_the_config_alone_after_its_session_ran_is_refused_at_its_first_request() -> None:
    store = MemoryStore()
    session = SteerableSession(open_session("s", store))
    agent = Agent(
        name="a", model=ScriptedModel([[assistant_message("one")], [assistant_message("two")]])
    )
    await Runner.run(agent, "first", session=session, run_config=steering(session))
    with pytest.raises(UsageError, match="session="):
        await Runner.run(agent, "second", run_config=steering(session))
    assert await _stored(store) == ["user:first", "message"]


async def test_the_session_alone_refuses_a_waiting_steer_at_its_input_and_the_retry_takes_it(
    store: Store,
) -> None:
    await open_session("s", store).steer("the blue one", id="k")
    model = ScriptedModel([[assistant_message("blue it is")]])
    agent = Agent(name="a", model=model)
    session = SteerableSession(open_session("s", store))
    with pytest.raises(UsageError, match=r"run_config=steering\(session\)"):
        await Runner.run(agent, "pick one", session=session)
    assert list(model.calls) == []  # refused before the model was asked
    assert await _stored(store) == ["user:pick one"]  # the input is kept
    assert [s.id for s in await open_session("s", store).steers()] == ["k"]  # still waiting
    result = await Runner.run(agent, [], session=session, run_config=steering(session))
    assert result.final_output == "blue it is"
    assert len(model.calls) == 1
    assert kinds(model.calls[0].input) == ["user:pick one", "user:the blue one"]
    assert await _stored(store) == ["user:pick one", "user:the blue one", "message"]


async def test_the_session_alone_refuses_a_steer_sent_during_a_tool_after_storing_its_output(
    store: Store,
) -> None:
    ran: list[str] = []

    @function_tool
    async def look(q: str) -> str:
        """Look something up (a steer comes meanwhile)."""
        ran.append(q)
        await open_session("s", store).steer("the blue one", id="k")
        return f"found {q}"

    model = ScriptedModel(calls_then_answer("x"))
    agent = Agent(name="a", model=model, tools=[look])
    session = SteerableSession(open_session("s", store))
    with pytest.raises(UsageError, match="1 steer"):
        await Runner.run(agent, "hi", session=session)
    turn = ["user:hi", "function_call", "function_call_output"]
    assert await _stored(store) == turn  # the tool's work is kept
    await Runner.run(agent, [], session=session, run_config=steering(session))
    assert ran == ["x"]  # not redone
    assert kinds(model.calls[-1].input) == [*turn, "user:the blue one"]
    assert await _stored(store) == [*turn, "user:the blue one", "message"]


async def test_a_session_of_no_steers_never_refuses_and_leaves_steers_waiting() -> None:
    store = MemoryStore()
    await open_session("s", store).steer("for someone else", id="k")
    agent = Agent(name="a", model=ScriptedModel([[assistant_message("x")]]))
    session = SteerableSession(open_session("s", store), steers=0)
    assert (await Runner.run(agent, "hi", session=session)).final_output == "x"
    assert await _stored(store) == ["user:hi", "message"]
    assert [s.id for s in await open_session("s", store).steers()] == ["k"]
