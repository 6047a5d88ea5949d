"""A step's write does not grow with the conversation; the thread reads back whole.

The same ReAct graph runs three tool steps on a thread that already holds 10, then 1,000
messages. Every save the saver makes during those steps is counted (the bytes of its
records' Native data): LangGraph's own savers store the whole message list at each
super-step, so theirs grow about a hundredfold; ours must stay as they were.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig

from steerable.integrations.langgraph._saver import SteerableSaver
from tests.integrations.langgraph_saver.graph import CountingStore, history, react_graph, tool_call
from tests.integrations.langgraph_saver.stores import open_store

STEPS = 3


async def _step_saves(store: CountingStore, messages: int) -> tuple[list[int], list[object]]:
    """The sizes of the saves of STEPS tool steps after ``messages`` stored; the final state."""
    thread = f"t{messages}"
    config = {"configurable": {"thread_id": thread}}
    script = iter([AIMessage("first answer")])
    first = react_graph(SteerableSaver(store), script)
    await first.ainvoke({"messages": history(messages)}, config, durability="sync")
    store.saves.clear()
    steps = iter([*(tool_call(1000 + n) for n in range(STEPS)), AIMessage("done")])
    graph = react_graph(SteerableSaver(store), steps)  # a new process's saver: no cache
    state = await graph.ainvoke({"messages": [HumanMessage("again")]}, config, durability="sync")
    return list(store.saves), state["messages"]


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_the_bytes_a_step_writes_do_not_grow_with_the_thread(
    kind: str, tmp_path: Path
) -> None:
    """Per save, the largest at 1,000 messages is within 1 KB of the largest at 10."""
    async with open_store(kind, tmp_path) as inner:
        store = CountingStore(inner)
        small, _ = await _step_saves(store, 10)
        large, state = await _step_saves(store, 1000)
    assert len(small) == len(large) > 2 * STEPS  # a put and the writes of each super-step
    assert max(large) <= max(small) + 1024, (small, large)
    # and the whole list of the 1,000 is there, read back from the deltas by a fresh saver
    assert len(state) == 1 + 2 * 500 + 1 + 1 + 2 * STEPS + 1


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_fresh_saver_reads_the_deltas_back_as_the_graph_left_them(
    kind: str, tmp_path: Path
) -> None:
    """After a run, a saver with no cache gives the graph's final messages, equal and in order."""
    async with open_store(kind, tmp_path) as store:
        config: RunnableConfig = {"configurable": {"thread_id": "t"}}
        script = iter([*(tool_call(n) for n in range(5)), AIMessage("done")])
        graph = react_graph(SteerableSaver(store), script)
        state = await graph.ainvoke({"messages": history(20)}, config, durability="sync")
        fresh = SteerableSaver(store)
        latest = await fresh.aget_tuple(config)
        assert latest is not None
        assert latest.checkpoint["channel_values"]["messages"] == state["messages"]
        # every earlier checkpoint reads back too, each a prefix of the next
        listed = [t async for t in fresh.alist(config)]
        lengths = [len(t.checkpoint["channel_values"].get("messages", [])) for t in listed]
        assert lengths == sorted(lengths, reverse=True) and lengths[0] == len(state["messages"])
        for newer, older in itertools.pairwise(listed):
            new = newer.checkpoint["channel_values"].get("messages", [])
            old = older.checkpoint["channel_values"].get("messages", [])
            assert new[: len(old)] == old
