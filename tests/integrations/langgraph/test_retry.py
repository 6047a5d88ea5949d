"""A retry with no checkpointer and the usual prompt (a dict, no id), on SQLite and Postgres.

The first attempt dies in its second tool call, after the step that took a steer was
stored (here its tool raises; ``test_crash.py``'s ``noid`` case SIGKILLs a process). The
retry is what a caller does: a new graph and middleware, the same input again. LangGraph
gives the prompt a new id, so only its text ties it to the stored turn.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware.types import InputAgentState
from langchain_core.runnables import RunnableConfig

from steerable.integrations.langgraph import SteeringMiddleware, from_stored
from steerable.session import Session
from steerable.store import Store
from tests.integrations.langgraph.chat import ScriptedChat, valid
from tests.integrations.langgraph.support import ids, shape, work_tool

CONFIG: RunnableConfig = {"configurable": {"thread_id": "s"}}


def _prompt(text: str) -> InputAgentState:
    return {"messages": [{"role": "user", "content": text}]}


class _Died(Exception):
    """The first attempt's process going away."""


class _Work:
    """The ``work`` tool's calls, counted; a first attempt dies in call ``dies_in``, and
    steers in call 1 if that is not the one."""

    def __init__(self, store: Store, dies_in: int | None) -> None:
        self.store, self.dies_in, self.calls = store, dies_in, 0

    async def __call__(self) -> None:
        self.calls += 1
        if self.dies_in is None:
            return
        if self.calls == 1 < self.dies_in:
            await Session("s", self.store).steer("skip friday", id="k")
        if self.calls == self.dies_in:
            raise _Died


async def _attempt(
    store: Store, text: str, *, rounds: int = 3, dies_in: int | None = None
) -> tuple[ScriptedChat, _Work, Any]:
    """One run of a new graph over ``store`` (a new process's), no checkpointer."""
    model, work = ScriptedChat(rounds=rounds), _Work(store, dies_in)
    agent = create_agent(model, [work_tool(work)], middleware=[SteeringMiddleware(store)])
    if dies_in is not None:
        with pytest.raises(_Died):
            await agent.ainvoke(_prompt(text), CONFIG)
        return model, work, None
    return model, work, await agent.ainvoke(_prompt(text), CONFIG)


async def test_a_retry_without_a_checkpointer_resumes_the_stored_turn(any_store: Store) -> None:
    await _attempt(any_store, "plan my week", dies_in=2)
    killed = shape(await Session("s", any_store).messages())
    assert killed == ["user:plan my week", "ai", "tool", "steer:skip friday"]

    model, work, state = await _attempt(any_store, "plan my week")
    stored = await Session("s", any_store).messages()

    assert state["messages"][-1].text == "answered: plan my week | skip friday"
    # the prompt once, the steer once where it was taken, every call with its one result
    assert shape(stored) == [
        *("user:plan my week", "ai", "tool", "steer:skip friday"),
        *("ai", "tool", "ai", "tool", "ai"),
    ]
    assert valid(from_stored(stored)) and ids(state["messages"]) == [m.id for m in stored]
    # the model saw the earlier steer in place, and the first tool did not run again
    first = model.requests[0]
    assert ids(first) == [m.id for m in stored[:4]] and first[3].text == "skip friday"
    assert work.calls == 2


async def test_the_prompt_of_a_finished_turn_again_is_a_new_turn(any_store: Store) -> None:
    await _attempt(any_store, "again", rounds=1)
    model, _, _ = await _attempt(any_store, "again", rounds=1)
    stored = await Session("s", any_store).messages()
    assert shape(stored) == ["user:again", "ai", "tool", "ai"] * 2
    assert len(model.requests[0]) == 1  # LangGraph's state without a checkpointer: the input


async def test_another_prompt_after_an_unfinished_turn_is_a_new_turn(any_store: Store) -> None:
    await _attempt(any_store, "one", rounds=1, dies_in=1)
    await _attempt(any_store, "two", rounds=1)
    stored = await Session("s", any_store).messages()
    assert shape(stored) == ["user:one", "user:two", "ai", "tool", "ai"]
