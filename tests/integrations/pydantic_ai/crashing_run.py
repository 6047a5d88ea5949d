"""A run that a test kills: ``python -m tests.integrations.pydantic_ai.crashing_run DB``.

It runs a Pydantic AI agent given ``Steering(store)``, on conversation ``s`` of the SQLite
file DB.
Its tool prints each call (``in-1``, ``in-2``); the first waits for a line on stdin, the
second blocks until the process is killed, so the test kills it right after the step that
took a steer was stored.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from pydantic_ai import Agent

from steerable.integrations.pydantic_ai import Steering
from steerable.stores.sqlite import SQLiteStore
from tests.integrations.pydantic_ai.support import Script, call, say


async def main(path: Path) -> None:
    """Run until killed (the second tool call never returns)."""
    async with SQLiteStore(path) as store:
        await _run(store)


async def _run(store: SQLiteStore) -> None:
    script = Script(call("work", "c1"), call("work", "c2"), say("never"))
    agent = Agent(script.model, capabilities=[Steering(store)])
    calls = 0

    @agent.tool_plain
    async def work() -> str:
        """Some work."""
        nonlocal calls
        calls += 1
        print(f"in-{calls}", flush=True)
        if calls > 1:
            await asyncio.Event().wait()  # until killed
        await asyncio.to_thread(sys.stdin.readline)
        return "worked"

    await agent.run("go", conversation_id="s")


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))
