"""A process that writes checkpoints to a SQLite file until it is killed.

``python -m tests.integrations.langgraph_saver.writer FILE`` puts checkpoint after
checkpoint on one thread, each with a messages list two longer than its parent's (so each
is stored as a delta) and a task's writes against it, and prints ``stored STEP`` once each
``aput`` has returned. The crash test SIGKILLs it wherever it is; given a second argument
N, it SIGKILLs itself inside its N-th save of the thread, once the store has stored it and
before the save returns (a put stored, its answer lost: the point where a saver that split
a put into two saves would leave half of one).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, empty_checkpoint
from langgraph.checkpoint.base.id import uuid6

from steerable.integrations.langgraph._saver import SteerableSaver
from steerable.messages import Message
from steerable.stores.sqlite import SQLiteStore

THREAD = "crashing"


def messages_at(step: int) -> list[AnyMessage]:
    """The messages a checkpoint of ``step`` holds: the crash test checks them whole."""
    out: list[AnyMessage] = []
    for n in range(step + 1):
        out += [HumanMessage(f"ask {n} " * 20, id=f"h{n}"), AIMessage(f"answer {n}", id=f"a{n}")]
    return out


class DyingStore(SQLiteStore):
    """A SQLite store whose process SIGKILLs itself inside its ``die_after``-th save."""

    die_after = 0
    saves = 0

    async def save(
        self, session: str, messages: Sequence[Message], *, at: int, take: int = 0
    ) -> list[Message]:
        """The save, then death if this is the one (empty probes and the saver's index of
        threads, a session of its own, are not counted)."""
        taken = await super().save(session, messages, at=at, take=take)
        if messages and session.endswith(THREAD):
            self.saves += 1
            if self.saves == self.die_after:
                os.kill(os.getpid(), signal.SIGKILL)
        return taken


async def write_forever(path: Path, die_after: int = 0) -> None:
    """Checkpoint after checkpoint; each line printed after its ``aput`` returned."""
    async with DyingStore(path) as store:
        store.die_after = die_after
        saver = SteerableSaver(store)
        config: RunnableConfig = {"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}}
        version: str | None = None
        for step in range(10**6):
            version = saver.get_next_version(version, None)
            checkpoint = empty_checkpoint()
            checkpoint["id"] = str(uuid6(clock_seq=step))
            checkpoint["channel_values"] = {"messages": messages_at(step), "step": step}
            checkpoint["channel_versions"] = {"messages": version, "step": version}
            metadata: Any = {"source": "loop", "step": step, "parents": {}}
            new: ChannelVersions = {"messages": version, "step": version}
            config = await saver.aput(config, checkpoint, metadata, new)
            print(f"stored {step}", flush=True)
            await saver.aput_writes(config, [("out", f"write {step}")], f"task{step}")


if __name__ == "__main__":
    asyncio.run(write_forever(Path(sys.argv[1]), int(sys.argv[2]) if sys.argv[2:] else 0))
