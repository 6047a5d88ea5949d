"""One replica of the sessions example: ``python replica.py ROLE DATABASE``.

Each role is its own OS process, sharing nothing with the others but the SQLite file:

- ``steer``: leaves a steer for the session; no run exists anywhere yet.
- ``run``: starts the turn. It takes the steer at its first step and calls a tool that
  announces itself on stdout and then works for a long time, so the example can kill it.
- ``resume``: loads the transcript it never produced and carries the turn on.
"""

from __future__ import annotations

import asyncio
import sys

from steerable import ModelRequest, Runner, ScriptedModel, Spec, open_session, user
from steerable.models.scripted import call
from steerable.stores.sqlite import SQLiteStore

SESSION = "conversation-1"
PROMPT = "why does renewLease fail for some tokens?"
STEER = "check the lease expiry, not the token"
_tool_seconds = 60.0


async def read_code(path: str) -> str:
    """Read a source file of the project."""
    print("tool-started", flush=True)  # the example kills the first replica here
    await asyncio.sleep(_tool_seconds)
    return "func renewLease(l *Lease) *Lease { if l.Expired() { return nil }; ... }"


def answer(request: ModelRequest) -> str:
    """The scripted model's answer, built from what it was actually sent."""
    steered = [m.text for m in request.messages if m.steered]
    if not steered:
        return "the token looks fine"
    return (
        "renewLease returns a nil lease when the lease has expired, whatever the token"
        f" (as asked: {steered[0]})"
    )


async def main(role: str, database: str) -> None:
    global _tool_seconds
    async with SQLiteStore(database) as store:
        session = open_session(SESSION, store)
        if role == "steer":
            await session.steer(STEER, id="steer-1")
            return
        if role == "run":
            messages = [user(PROMPT)]
        else:
            _tool_seconds = 0.01
            messages = await session.messages()
            print(f"loaded {len(messages)}", flush=True)
        model = ScriptedModel([call("read_code", '{"path": "lease.go"}'), answer])
        spec = Spec(tools=[read_code], session=session, max_steps=4)
        result = await Runner.run(spec, messages, model)
        print(f"answer {result.output}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
