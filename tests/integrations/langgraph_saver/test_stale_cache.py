"""A saver's kept copy of a thread is checked before each read: another saver's write shows.

Saver A reads a thread (and keeps its log); saver B, another object over the same store
(as another process would be), writes a checkpoint; A's next read must return B's. A read
that trusted its copy would return the old checkpoint, and A's next write would fork the
thread from it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6

from steerable.integrations.langgraph._saver import SteerableSaver
from tests.integrations.langgraph_saver.stores import open_store

CONFIG: RunnableConfig = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}


async def _put(saver: SteerableSaver, step: int, parent: str | None) -> str:
    version = saver.get_next_version(parent, None)
    checkpoint = empty_checkpoint()
    checkpoint["id"] = str(uuid6(clock_seq=step))
    checkpoint["channel_values"] = {"messages": [HumanMessage(f"m{step}", id=f"m{step}")]}
    checkpoint["channel_versions"] = {"messages": version}
    await saver.aput(CONFIG, checkpoint, {"step": step}, {"messages": version})
    return version


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
async def test_a_read_after_another_savers_write_returns_that_write(
    kind: str, tmp_path: Path
) -> None:
    async with open_store(kind, tmp_path) as store:
        a, b = SteerableSaver(store), SteerableSaver(store)
        version = await _put(a, 0, None)
        first = await a.aget_tuple(CONFIG)  # A keeps the thread's log
        assert first is not None and first.metadata["step"] == 0
        await _put(b, 1, version)
        latest = await a.aget_tuple(CONFIG)
    assert latest is not None and latest.metadata["step"] == 1
    assert latest.checkpoint["channel_values"]["messages"][0].text == "m1"
