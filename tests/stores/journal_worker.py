"""A process that runs one turn calling a journaled tool, and may kill itself with SIGKILL.

``python journal_worker.py STORE_URL SESSION POINT first|resume IDEMPOTENT LEDGER``:
``first`` starts the turn ("pay") and dies at ``POINT`` (``before-begin``: the reply is
stored, its call not begun; ``in-tool``: inside the tool, after its effect; ``after-end``:
the call's result recorded, the next step not saved); ``resume`` loads the stored
transcript in a fresh process and finishes the turn, printing the output and whether the
result was replayed. The tool's effect is a line in ``LEDGER`` (the outside world): its
call key and whether it was a retry. Used by test_journal_crash.py; not a test module.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys

from steerable import ModelRequest, Runner, ScriptedModel, Spec, open_session, tool, user
from steerable.events import Event, Saved, ToolEnded
from steerable.journal import ToolContext
from steerable.models.scripted import ReplyLike, call
from steerable.stores.url import open_url


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def reply(request: ModelRequest) -> ReplyLike:
    results = [r for m in request.messages for r in m.tool_results]
    if not results:
        return call("pay", '{"amount": 5}', id="call-pay")
    return f"done: {results[-1].content}"


async def main(url: str, sid: str, point: str, role: str, idempotent: str, ledger: str) -> None:
    killing = role == "first"
    saves = 0

    @tool(side_effects=True, idempotent=idempotent == "yes")
    def pay(amount: int, context: ToolContext) -> str:
        """Pay ``amount``."""
        with open(ledger, "a") as out:
            out.write(f"{context.key} {context.retried}\n")
            out.flush()
            os.fsync(out.fileno())
        if killing and point == "in-tool":
            die()
        return f"paid {amount}"

    replayed: list[bool] = []

    def sink(event: Event) -> None:
        nonlocal saves
        if isinstance(event, ToolEnded):
            replayed.append(event.replayed)
            if killing and point == "after-end":
                die()
        if isinstance(event, Saved):
            saves += 1
            if killing and point == "before-begin" and saves == 2:  # the reply's own save
                die()

    async with open_url(url) as store:
        session = open_session(sid, store)
        messages = [user("pay")] if killing else await session.messages()
        spec = Spec(tools=[pay], session=session, max_steps=4)
        result = await Runner.run(spec, messages, ScriptedModel([reply] * 3), sink)
        print(json.dumps({"reason": result.reason, "output": result.output, "replayed": replayed}))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:7]))
