"""Two writers of one thread at once (two savers, as two processes would have): no corruption.

Each saver keeps its own copy of the thread's log; when the other wrote first, its save is
a conflict, it reloads and builds its record again (a delta against its own parent). After
both chains are written, a fresh saver reads every checkpoint whole.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from langchain_core.messages import AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6

from steerable.errors import TranscriptConflict
from steerable.integrations.langgraph._saver import SteerableSaver
from steerable.stores.sqlite import SQLiteStore
from tests.integrations.langgraph_saver.graph import CountingStore

STEPS = 12


def _messages(writer: str, step: int) -> list[AnyMessage]:
    return [HumanMessage(f"{writer} {n}", id=f"{writer}{n}") for n in range(step + 1)]


async def _chain(saver: SteerableSaver, writer: str) -> None:
    """STEPS checkpoints in the namespace ``writer``, each list one longer than its parent's."""
    config: RunnableConfig = {"configurable": {"thread_id": "shared", "checkpoint_ns": writer}}
    version: str | None = None
    for step in range(STEPS):
        version = saver.get_next_version(version, None)
        checkpoint = empty_checkpoint()
        checkpoint["id"] = str(uuid6(clock_seq=step))
        checkpoint["channel_values"] = {"messages": _messages(writer, step)}
        checkpoint["channel_versions"] = {"messages": version}
        config = await saver.aput(config, checkpoint, {"step": step}, {"messages": version})
        await saver.aput_writes(config, [("out", step)], f"{writer}-task")
        await asyncio.sleep(0)  # let the other writer in between


class ConflictCounting(CountingStore):
    """A counting store that also counts the conflicts its saves met."""

    conflicts = 0

    async def save(self, session, messages, *, at, take=0):  # type: ignore[no-untyped-def]
        """The save; a conflict counted on its way out."""
        try:
            return await super().save(session, messages, at=at, take=take)
        except TranscriptConflict:
            type(self).conflicts += 1
            raise


@pytest.mark.parametrize("same_saver", [False, True])
async def test_two_writers_of_one_thread_leave_every_checkpoint_whole(
    same_saver: bool, tmp_path: Path
) -> None:
    """Two savers (or two tasks of one saver) interleave their puts; all read back whole."""
    ConflictCounting.conflicts = 0
    async with SQLiteStore(tmp_path / "t.db") as one, SQLiteStore(tmp_path / "t.db") as two:
        first = SteerableSaver(ConflictCounting(one))
        second = first if same_saver else SteerableSaver(ConflictCounting(two))
        await asyncio.gather(_chain(first, "a"), _chain(second, "b"))
        if not same_saver:
            assert ConflictCounting.conflicts > 0  # they did get in each other's way
        fresh = SteerableSaver(one)
        for writer in ("a", "b"):
            config: RunnableConfig = {
                "configurable": {"thread_id": "shared", "checkpoint_ns": writer}
            }
            listed = [t async for t in fresh.alist(config)]
            assert [t.metadata["step"] for t in listed] == list(range(STEPS - 1, -1, -1))
            for tup in listed:
                step = tup.metadata["step"]
                assert tup.checkpoint["channel_values"] == {"messages": _messages(writer, step)}
                assert [w[2] for w in tup.pending_writes or []] == [step]
