"""A service turn of :class:`ADKAgent` calling a journaled tool, in a process of its own that
may kill itself with SIGKILL; or the fresh process that carries the turn on.

    python -m tests.integrations.adk.journal_run STORE_URL POINT ROLE IDEMPOTENT LEDGER REQUESTS

``first`` serves the turn ``t`` ("pay the bill") of session ``s`` and dies at ``POINT``:
``before-begin`` (the reply that called ``pay`` is stored, the call not begun: in the
agent's before-tool callback, after the steering plugin's), ``in-tool`` (inside ``pay``,
after its effect), ``after-end`` (the call's result recorded in the journal, the next step
not saved: in the agent's after-tool callback). ``resume`` serves the same store in a fresh
process, which takes the turn over once the first's 3 s lease has lapsed, waits for the
turn's end and prints it as one JSON line.

The model calls ``pay`` under an id naming the process (``pay-first``, ``pay-resume``), as a
real model gives every reply fresh ids: a resume that asked the model again, rather than
carrying the stored call on, would call it under another id (and another journal key).
The tool's effect is a line in LEDGER: its journal key and whether it was a retry. Every
model request is appended to REQUESTS.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncGenerator
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext as AdkToolContext

from steerable.integrations.adk import ADKAgent, journaled
from steerable.journal import ToolContext
from steerable.service import Service
from steerable.stores.url import open_url
from tests.integrations.adk.scripted import ScriptedLlm, call, say

POINTS = ("before-begin", "in-tool", "after-end")


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class PayingLlm(ScriptedLlm):
    """Calls ``pay`` until a request holds its response, then answers with that response."""

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        """Record the request, then call ``pay`` or answer."""
        contents = [c.model_dump(mode="json", exclude_none=True) for c in llm_request.contents]
        self.record(contents)
        responses = [
            part["function_response"]["response"]
            for content in contents
            for part in content.get("parts", [])
            if "function_response" in part
        ]
        if responses:
            yield say("done: " + json.dumps(responses[-1], sort_keys=True))
        else:
            yield call("pay", f"pay-{self.replica}", amount=5)


def agent(point: str, role: str, idempotent: bool, ledger: str, requests: str) -> ADKAgent:
    """The turn's agent: ``pay`` journaled, the kill at ``point`` when ``role`` is first."""
    killing = role == "first"

    @journaled(idempotent=idempotent)
    def pay(amount: int, context: ToolContext) -> dict[str, Any]:
        """Pay ``amount``."""
        with open(ledger, "a", encoding="utf-8") as out:
            out.write(f"{context.key} {context.retried} {context.call.id}\n")
            out.flush()
            os.fsync(out.fileno())
        if killing and point == "in-tool":
            die()
        return {"paid": amount}

    def before(tool: BaseTool, args: dict[str, Any], tool_context: AdkToolContext) -> None:
        if killing and point == "before-begin":
            die()

    def after(
        tool: BaseTool, args: dict[str, Any], tool_context: AdkToolContext, tool_response: Any
    ) -> None:
        if killing and point == "after-end":
            die()

    model = PayingLlm(model="paying", record_to=requests, replica=role)
    root = LlmAgent(
        name="payer",
        model=model,
        tools=[pay],
        before_tool_callback=before,
        after_tool_callback=after,
    )
    return ADKAgent(root)


async def main(url: str, point: str, role: str, idempotent: str, ledger: str, req: str) -> None:
    """Run, or carry on, the turn as the module docstring says."""
    if point not in POINTS or role not in ("first", "resume"):
        raise SystemExit(f"no point {point!r} or role {role!r}")
    served = agent(point, role, idempotent == "yes", ledger, req)
    async with open_url(url) as store:
        service = Service(store, served, lease=3.0, poll=0.05)  # 1 s lapsed on a loaded CI machine
        async with service.serving():
            if role == "first":
                await service.send("s", "pay the bill", id="t")
            done = await service.wait("s", "t", seconds=60)
    if role == "first":
        raise SystemExit(f"the first run was to be killed {point}: {done}")
    assert done is not None, "the turn was carried on"
    print(json.dumps({"state": done.state, "text": done.text}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:7]))
