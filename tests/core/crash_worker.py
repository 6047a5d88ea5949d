"""A process that runs one turn over a SQLite session and kills itself with SIGKILL.

``python crash_worker.py DATABASE POINT first|resume``. ``first`` starts the turn and dies at
``POINT``; ``resume`` loads the stored transcript in a fresh process and finishes the turn.
Used by test_crash.py; not a test module itself.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from steerable import ModelRequest, Runner, ScriptedModel, Spec, open_session, user
from steerable.events import Event, Saved, SteersTaken
from steerable.models.scripted import ReplyLike, call
from steerable.stores.sqlite import SQLiteStore

SESSION = "crash"


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


async def main(database: str, point: str, role: str) -> None:
    killing = role == "first"
    saves = 0
    async with SQLiteStore(database) as store:
        session = open_session(SESSION, store)

        async def work(step: int) -> str:
            """A tool that steers the session while it works."""
            await session.steer(f"steer during tool {step}", id=f"during-{step}")
            if killing and point == "during-tool":
                die()
            return f"worked {step}"

        def reply(request: ModelRequest) -> ReplyLike:
            calls = sum(len(m.tool_calls) for m in request.messages)
            if killing and point == "during-model" and calls == 1:
                die()
            if calls < 2:
                return call("work", f'{{"step": {calls + 1}}}')
            return "all done"

        def sink(event: Event) -> None:
            nonlocal saves
            if not killing:
                return
            took = isinstance(event, SteersTaken) and [m.id for m in event.messages]
            if point == "after-take" and took and "during-1" in took:  # taken from the store
                die()
            if isinstance(event, Saved):
                saves += 1
                if point == "after-save" and saves == 2:
                    die()

        if role == "first":
            await session.steer("steer before the run", id="before")
            messages = [user("start")]
        else:
            messages = await session.messages()
        spec = Spec(tools=[work], session=session, max_steps=8)
        result = await Runner.run(spec, messages, ScriptedModel([reply] * 6), sink)
        print(result.reason, result.output, flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
