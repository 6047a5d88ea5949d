"""Agents for ``steerable serve`` tests of the tool journal: a turn that calls ``pay`` once.

``pay`` has side effects: it appends its call key and whether it is a retry to the file
``$STEERABLE_TEST_LEDGER`` (the outside world), then, in a replica started with
``STEERABLE_TEST_DIE_IN_TOOL=1``, kills its own process with SIGKILL before it returns: the
replica dies inside the tool, after its effect.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator

from steerable.journal import ToolContext
from steerable.messages import Message, Text, ToolCall
from steerable.models.base import ModelEvent, ModelRequest, Reply, Usage
from steerable.service.agent import ReActAgent
from steerable.service.demo import turn_of_request
from steerable.spec import Spec
from steerable.tools import Tool, tool


class PayingModel:
    """Calls ``pay`` once a turn, then answers with what its result said."""

    name = "paying"

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """The reply to ``request``: the call, or the answer."""
        results = [r for m in turn_of_request(request.messages) for r in m.tool_results]
        if results:
            message = Message("assistant", (Text(f"done: {results[-1].content}"),))
        else:
            message = Message("assistant", (ToolCall("call-pay", "pay", '{"amount": 5}'),))
        yield Reply(message, Usage(1, 1, requests=1))


def _pay(idempotent: bool) -> Tool:
    def pay(amount: int, context: ToolContext) -> str:
        """Pay ``amount``."""
        with open(os.environ["STEERABLE_TEST_LEDGER"], "a") as ledger:
            ledger.write(f"{os.getpid()} {context.key} {context.retried}\n")
            ledger.flush()
            os.fsync(ledger.fileno())
        if os.environ.get("STEERABLE_TEST_DIE_IN_TOOL") == "1":
            os.kill(os.getpid(), signal.SIGKILL)
        return f"paid {amount}"

    return tool(side_effects=True, idempotent=idempotent)(pay)


def paying() -> ReActAgent:
    """``pay`` is not idempotent: an interrupted call is reported unknown, not run again."""
    return ReActAgent(Spec(tools=[_pay(False)], max_steps=4), PayingModel())


def paying_idempotent() -> ReActAgent:
    """``pay`` is idempotent: an interrupted call is run again, under the same key."""
    return ReActAgent(Spec(tools=[_pay(True)], max_steps=4), PayingModel())
