"""A fresh process's first ADK turn: what it imported, and whether its lease held.

    python -m tests.integrations.adk.first_turn STORE.db [--cold]

Builds an :class:`ADKAgent` (``--cold``: without its warm-up), then serves one turn (a tool
call and an answer) under a 1 s lease over SQLite, and prints one JSON line: the modules of
``google`` imported while the turn ran, the turn's state, and the replica's counters.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys

from google.adk.agents import LlmAgent

from steerable.integrations.adk import ADKAgent
from steerable.service import Service
from steerable.stores.sqlite import SQLiteStore
from tests.integrations.adk.scripted import ScriptedLlm, call, say


async def work(task: str) -> str:
    """Do ``task``."""
    return f"{task}: done"


async def main(path: str, cold: bool) -> None:
    """Serve one turn; print what it imported and the counters."""
    model = ScriptedLlm(model="scripted", script=[call("work", "c1", task="plan"), say("done")])
    agent = ADKAgent(LlmAgent(name="planner", model=model, tools=[work]), warm_up=not cold)
    async with SQLiteStore(path) as store:
        service = Service(store, agent, lease=1.0, poll=0.05)
        async with service.serving():
            before = set(sys.modules)
            sent = await service.send("s", "plan my week", id="p")
            done = await service.wait("s", sent.id, seconds=30)
            imported = sorted(m for m in set(sys.modules) - before if m.startswith("google"))
            assert service.replica is not None
            counters = dataclasses.asdict(service.replica.counters)
    state = done.state if done is not None else None
    print(json.dumps({"imported": imported, "state": state, "counters": counters}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], "--cold" in sys.argv[2:]))
