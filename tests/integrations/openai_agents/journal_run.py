"""A run whose model calls a journaled tool, and which may kill itself with SIGKILL.

``python -m tests.integrations.openai_agents.journal_run URL POINT ROLE IDEMPOTENT LEDGER``:
ROLE ``first`` runs ``Runner.run(agent, "pay", ...)`` on session ``j`` and dies at POINT
(``in-tool``: inside the tool, after its effect; ``after-end``: the call's result recorded,
before the next request's step stored it); ROLE ``resume`` is a fresh process carrying the
run on the documented way, ``Runner.run(agent, [], ...)``, and prints (one JSON line) the
final output and the input of each model request, as the SDK's own model saw it.

The tool's effect is a line in LEDGER (``<key> <retried>``, fsync'd): the outside world. Used
by test_journaled.py; not a test module.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from typing import Any

from agents import Agent, RunHooks, Runner, function_tool
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

from steerable import open_session
from steerable.integrations.openai_agents import (
    SteerableSession,
    journal_hooks,
    journaled,
    steering,
)
from steerable.journal import ToolContext
from steerable.stores.url import open_url
from tests.integrations.openai_agents import support  # noqa: F401 (no tracing export)


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def respond(call: ModelCall) -> list[Any]:
    """``pay`` once (the call id ``call-pay``), then an answer quoting its output."""
    outputs = [i for i in call.input if i.get("type") == "function_call_output"]
    if not outputs:
        return [function_call("pay", {"amount": 5}, call_id="call-pay")]
    return [assistant_message(f"done: {outputs[-1]['output']}")]


class _DieAfterTheTool(RunHooks[Any]):
    """Kills the process as the tool ends: its result is recorded, nothing stored after."""

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
        die()


async def main(url: str, point: str, role: str, idempotent: str, ledger: str) -> None:
    killing = role == "first"

    @function_tool
    @journaled(idempotent=idempotent == "yes")
    def pay(amount: int, context: ToolContext) -> str:
        """Pay ``amount``."""
        with open(ledger, "a") as out:
            out.write(f"{context.key} {context.retried}\n")
            out.flush()
            os.fsync(out.fileno())
        if killing and point == "in-tool":
            die()
        return f"paid {amount}"

    model = ScriptedModel([ModelStep.respond(respond) for _ in range(3)])
    agent = Agent(name="payer", model=model, tools=[pay])
    own = _DieAfterTheTool() if killing and point == "after-end" else None
    async with open_url(url) as store:
        session = SteerableSession(open_session("j", store))
        result = await Runner.run(
            agent,
            "pay" if killing else [],
            session=session,
            run_config=steering(session),
            hooks=journal_hooks(session, own),
        )
        inputs = [list(c.input) for c in model.calls]
        print(json.dumps({"output": result.final_output, "inputs": inputs}))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
