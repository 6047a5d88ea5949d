"""A LangGraph run in a process of its own, for the SIGKILL tests.

    python -m tests.integrations.langgraph.child STORE CHECKPOINTS REQUESTS HOW ATTEMPT

runs ``create_agent`` (three tool rounds of :class:`ScriptedChat`, requests appended to
REQUESTS) with :class:`SteeringMiddleware` over the session ``"s"`` of the SQLite file
STORE. During the first tool call another process steers ``"k"``. On the first ATTEMPT the
process SIGKILLs itself once that steer is taken, by HOW:

- ``tool``: in the tool of the next step (its checkpoint, an ``AsyncSqliteSaver`` in the
  file CHECKPOINTS with ``durability="sync"``, has the steer);
- ``take``: inside the step that took it, right after the store answered (the checkpoint
  does not have it);
- ``nocheckpoint``: in the tool of the next step, with no checkpointer at all;
- ``noid``: the same, the prompt the usual dict without an id, and the middleware over the
  store (the session is the thread, ``"s"``).

A later attempt resumes the thread from its checkpoint (``ainvoke(None)``), or, with none,
runs the same prompt again; it prints the run's message ids as one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware.types import InputAgentState
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.runtime import Runtime

from steerable.integrations.langgraph import SteeringMiddleware
from steerable.integrations.langgraph._middleware import SteeringState
from steerable.session import Session
from steerable.stores.sqlite import SQLiteStore
from tests.integrations.langgraph.chat import ScriptedChat
from tests.integrations.langgraph.support import steer_from_another_process, work_tool

CONFIG: RunnableConfig = {"configurable": {"thread_id": "t"}}


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class _DyingAfterTheTake(SteeringMiddleware):
    @property
    def name(self) -> str:
        # the graph's node names come from it: the retry's graph must have the same nodes
        return "SteeringMiddleware"

    async def abefore_model(
        self, state: SteeringState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        update = await super().abefore_model(state, runtime)
        if self.taken():
            _die()
        return update


async def _run(store_path: Path, saver: AsyncSqliteSaver | None, how: str, first: bool) -> None:
    async with SQLiteStore(store_path) as store:
        session = Session("s", store)
        rounds = {"n": 0}

        async def during() -> None:
            rounds["n"] += 1
            if first and rounds["n"] == 1:
                await steer_from_another_process(store_path, "s", "skip friday", "k")
            elif first and rounds["n"] == 2 and how != "take":
                _die()

        kind = _DyingAfterTheTake if how == "take" and first else SteeringMiddleware
        agent = create_agent(
            ScriptedChat(rounds=3, record_to=sys.argv[3]),
            [work_tool(during)],
            middleware=[kind(store if how == "noid" else session)],
            checkpointer=saver,
        )
        prompt: InputAgentState = {"messages": [HumanMessage("plan my week", id="p")]}
        config = CONFIG
        if how == "noid":
            prompt = {"messages": [{"role": "user", "content": "plan my week"}]}
            config = {"configurable": {"thread_id": "s"}}
        resume = saver is not None and not first
        if resume:
            assert (await agent.aget_state(config)).next, "the thread has a step to resume"
        # durability="sync" without a checkpointer fails in LangGraph 1.2.24 (AttributeError:
        # no _put_checkpoint_fut), so it is given only with one
        extra: dict[str, Any] = {} if saver is None else {"durability": "sync"}
        state = await agent.ainvoke(None if resume else prompt, config, **extra)
        print(json.dumps({"ids": [m.id for m in state["messages"]]}))


async def main() -> None:
    """Run (or retry) the run; see the module docstring."""
    store, checkpoints, _, how, attempt = sys.argv[1:]
    first = attempt == "1"
    if how in ("nocheckpoint", "noid"):
        await _run(Path(store), None, how, first)
        return
    async with AsyncSqliteSaver.from_conn_string(checkpoints) as saver:
        await _run(Path(store), saver, how, first)


if __name__ == "__main__":
    asyncio.run(main())
