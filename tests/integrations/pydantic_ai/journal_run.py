"""A Pydantic AI run calling a journaled tool, which may kill its own process with SIGKILL.

``python -m tests.integrations.pydantic_ai.journal_run URL POINT first|resume IDEMPOTENT
LEDGER SHAPE``: ``first`` runs ``agent.run("pay", conversation_id="journal")`` on an Agent
given ``Steering(store)``; its model calls ``pay`` (call id ``call-first``) and the process
dies at ``POINT`` (``in-tool``: inside the tool, after its effect; ``after-end``: the call's
result recorded, before the next step is stored). ``resume`` carries the turn on in a fresh
process through the integration's retry path: ``agent.run(None, conversation_id=...)``
(SHAPE ``agent``) or ``Steering.load`` and its history (SHAPE ``load``), and prints, as
JSON, the output and the returns the model's first request held. A model asked again for
the call (the reply was not stored) calls it under a new id, ``call-resume``. The tool's
effect is a line in LEDGER: its key, whether it was retried, the call id. Used by
test_journaled.py; not a test module.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from typing import Any

from pydantic_ai import Agent, RunContext
from pydantic_ai.capabilities import AbstractCapability, ValidatedToolArgs
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import ToolDefinition

from steerable import Session
from steerable.integrations.pydantic_ai import Steering, journaled
from steerable.journal import ToolContext
from steerable.stores.url import open_url
from tests.integrations.pydantic_ai.support import call


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class _DieAfterTheTool(AbstractCapability[Any]):
    """Kills the process once a tool call returned (its result recorded), before the next step."""

    async def after_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: Any,
        tool_def: ToolDefinition,
        args: ValidatedToolArgs,
        result: Any,
    ) -> Any:
        die()
        return result


async def main(url: str, point: str, role: str, idempotent: str, ledger: str, shape: str) -> None:
    killing = role == "first"
    seen: list[list[ModelMessage]] = []

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if not returns:
            return call("pay", f"call-{role}", '{"amount": 5}')
        return ModelResponse(parts=[TextPart(f"done: {returns[-1].model_response_str()}")])

    capabilities: list[AbstractCapability[Any]] = []
    if killing and point == "after-end":
        capabilities.append(_DieAfterTheTool())

    async with open_url(url) as store:
        if killing or shape == "agent":
            capabilities.append(Steering(store))
        agent = Agent(FunctionModel(answer), capabilities=capabilities)

        @agent.tool
        @journaled(idempotent=idempotent == "yes")
        def pay(ctx: RunContext[None], amount: int, context: ToolContext) -> str:
            """Pay ``amount``."""
            with open(ledger, "a") as out:
                out.write(f"{context.key} {context.retried} {ctx.tool_call_id}\n")
                out.flush()
                os.fsync(out.fileno())
            if killing and point == "in-tool":
                die()
            return f"paid {amount}"

        if killing or shape == "agent":
            result = await agent.run("pay" if killing else None, conversation_id="journal")
        else:
            steering = await Steering.load(Session("journal", store))
            result = await agent.run(
                None, message_history=steering.history, capabilities=[steering]
            )
        first = seen[0] if seen else []
        returns = [
            [p.tool_call_id, p.model_response_str(wrap_if_error=False), p.outcome]
            for m in first
            for p in m.parts
            if isinstance(p, ToolReturnPart)
        ]
        print(json.dumps({"output": result.output, "returns": returns, "asked": len(seen)}))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:7]))
