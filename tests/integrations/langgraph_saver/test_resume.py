"""The retry after a failure, LangGraph's way: ``invoke(None, config)`` on the same thread.

A graph fans out to two nodes in one super-step; ``slow`` fails the first time, after
``fast`` has finished. The retry (``None`` as input, the same thread, a new saver as a new
process would have) goes on from the last checkpoint: ``fast``'s write was stored as a
pending write, so it does not run again, and ``slow`` does. Sync on SQLite, async on
Postgres.
"""

from __future__ import annotations

import operator
import threading
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph

from steerable.integrations.langgraph._saver import SteerableSaver
from steerable.stores.sqlite import SQLiteStore
from tests.integrations.langgraph_saver.stores import open_store

CONFIG: RunnableConfig = {"configurable": {"thread_id": "retried"}}


class State(TypedDict):
    done: Annotated[list[str], operator.add]


def fan_out(saver: SteerableSaver, runs: list[str], fail: list[bool]) -> Any:
    """START -> fast and slow (one super-step) -> END; ``slow`` fails while ``fail[0]``,
    once ``fast`` has returned (LangGraph runs the two in threads of its own)."""
    fast_done = threading.Event()

    def fast(state: State) -> dict[str, list[str]]:
        runs.append("fast")
        fast_done.set()
        return {"done": ["fast"]}

    def slow(state: State) -> dict[str, list[str]]:
        runs.append("slow")
        if fail[0]:
            fast_done.wait(10)  # a bound, not a timing assertion: the test checks outcomes
            fail[0] = False
            raise RuntimeError("the process died here")
        return {"done": ["slow"]}

    builder = StateGraph(State)
    builder.add_node("fast", fast)
    builder.add_node("slow", slow)
    builder.add_edge(START, "fast")
    builder.add_edge(START, "slow")
    builder.add_edge("fast", END)
    builder.add_edge("slow", END)
    return builder.compile(checkpointer=saver)


def test_a_sync_retry_runs_only_the_node_that_failed(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "retry.db")
    runs: list[str] = []
    fail = [True]
    with pytest.raises(RuntimeError, match="died here"):
        fan_out(SteerableSaver(store), runs, fail).invoke({"done": []}, CONFIG)
    assert sorted(runs) == ["fast", "slow"]
    runs.clear()
    state = fan_out(SteerableSaver(store), runs, fail).invoke(None, CONFIG)
    assert runs == ["slow"] and sorted(state["done"]) == ["fast", "slow"]


async def test_an_async_retry_runs_only_the_node_that_failed(tmp_path: Path) -> None:
    async with open_store("postgres", tmp_path) as store:
        runs: list[str] = []
        fail = [True]
        with pytest.raises(RuntimeError, match="died here"):
            await fan_out(SteerableSaver(store), runs, fail).ainvoke({"done": []}, CONFIG)
        runs.clear()
        state = await fan_out(SteerableSaver(store), runs, fail).ainvoke(None, CONFIG)
        assert runs == ["slow"] and sorted(state["done"]) == ["fast", "slow"]
