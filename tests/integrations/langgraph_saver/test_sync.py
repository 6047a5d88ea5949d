"""The saver's sync prune and copy_thread work from a thread other than the loop's, like
its other sync methods; delete_for_runs is LangGraph's own absent method, sync or async."""

from __future__ import annotations

import asyncio

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6

from steerable.errors import UsageError
from steerable.integrations.langgraph._saver import SteerableSaver
from steerable.stores.memory import MemoryStore


def _config(thread: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


async def _chain(saver: SteerableSaver, thread: str, steps: int) -> None:
    version: str | None = None
    for step in range(steps):
        version = saver.get_next_version(version, None)
        checkpoint = empty_checkpoint()
        checkpoint["id"] = str(uuid6(clock_seq=step))
        checkpoint["channel_values"] = {"messages": [HumanMessage(f"m{step}", id=f"m{step}")]}
        checkpoint["channel_versions"] = {"messages": version}
        await saver.aput(_config(thread), checkpoint, {"step": step}, {"messages": version})


async def test_sync_prune_and_copy_thread_work_from_another_thread() -> None:
    saver = SteerableSaver(MemoryStore())
    await _chain(saver, "a", 3)
    await asyncio.to_thread(saver.copy_thread, "a", "b")
    await asyncio.to_thread(saver.prune, ["a"])
    kept = [t.metadata["step"] async for t in saver.alist(_config("a"))]
    copied = [t.metadata["step"] async for t in saver.alist(_config("b"))]
    assert kept == [2] and copied == [2, 1, 0]
    with pytest.raises(UsageError, match="sync methods"):
        saver.prune(["a"])  # on the loop's own thread, as every sync method


async def test_delete_for_runs_is_langgraph_s_absent_method() -> None:
    saver = SteerableSaver(MemoryStore())
    with pytest.raises(NotImplementedError):
        await saver.adelete_for_runs(["run"])
    with pytest.raises(NotImplementedError):
        await asyncio.to_thread(saver.delete_for_runs, ["run"])
