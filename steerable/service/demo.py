"""A keyless agent for demos, tests and the chaos script: a rule-following model and one tool.

:class:`DemoModel` decides from the request alone (so a resumed turn, on any replica, gets
the answer a fresh one would): while the turn has made fewer than ``calls`` tool calls it
calls ``work``; then it answers with every user message of the turn, in order, so the
answer shows which steers the turn took and where. ``work`` sleeps ``seconds`` (async, or
in a thread with ``blocking=True``: a sync tool that holds a worker thread, never the event
loop) and returns what it was asked.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Sequence

from steerable.messages import Message, Text, ToolCall, new_id
from steerable.models.base import ModelEvent, ModelRequest, Reply, TextDelta, Usage
from steerable.service.agent import ReActAgent
from steerable.spec import Spec
from steerable.tools import Tool, tool

__all__ = ["DemoModel", "demo_agent", "turn_of_request"]


def turn_of_request(messages: Sequence[Message]) -> list[Message]:
    """The messages of the turn a request is for: from its prompt (the last user message
    with text that was not steered) on."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.role == "user" and message.text and not message.steered:
            return list(messages[index:])
    return list(messages)


class DemoModel:
    """Calls ``work`` ``calls`` times per turn, then answers with the turn's user texts.

    ``record``, if given, is called with every request as it arrives (tests read them).
    ``delay`` is spent before each reply, like a model thinking.
    """

    def __init__(
        self,
        *,
        calls: int = 1,
        delay: float = 0.0,
        record: Callable[[ModelRequest], object] | None = None,
    ) -> None:
        self.calls = calls
        self.delay = delay
        self.record = record

    @property
    def name(self) -> str:
        """``"demo"``."""
        return "demo"

    def reply(self, request: ModelRequest) -> Message:
        """The reply to ``request``: a ``work`` call, or the answer."""
        mine = turn_of_request(request.messages)
        made = sum(len(m.tool_calls) for m in mine)
        if made < self.calls:
            arguments = json.dumps({"step": made + 1})
            return Message("assistant", (ToolCall(f"call_{new_id()[:12]}", "work", arguments),))
        heard = [m.text for m in mine if m.role == "user" and m.text]
        return Message("assistant", (Text("answered: " + " | ".join(heard)),))

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Record the request, think for ``delay``, then stream the reply."""
        if self.record is not None:
            self.record(request)
        message = self.reply(request)
        if self.delay:
            await asyncio.sleep(self.delay)
        for word in message.text.split(" ") if message.text else ():
            yield TextDelta(word + " ")
        yield Reply(message, Usage(len(request.messages), 1, requests=1))


def work_tool(seconds: float, *, blocking: bool = False) -> Tool:
    """The ``work`` tool: sleeps ``seconds`` and says which step it did."""
    if blocking:

        def work_blocking(step: int) -> str:
            """Do one step of work (holds a worker thread)."""
            time.sleep(seconds)
            return f"step {step} done"

        return tool(name="work")(work_blocking)

    async def work(step: int) -> str:
        """Do one step of work."""
        await asyncio.sleep(seconds)
        return f"step {step} done"

    return tool(work)


def demo_agent(
    *,
    calls: int = 1,
    seconds: float = 0.5,
    blocking: bool = False,
    delay: float = 0.0,
    steers_per_turn: int = 16,
    record: Callable[[ModelRequest], object] | None = None,
) -> ReActAgent:
    """A :class:`ReActAgent` over :class:`DemoModel` and ``work``; needs no key."""
    spec = Spec(
        tools=[work_tool(seconds, blocking=blocking)],
        max_steps=calls + 4,
        steers_per_turn=steers_per_turn,
        instructions="Do the work, then answer every message of the turn.",
    )
    return ReActAgent(spec, DemoModel(calls=calls, delay=delay, record=record))
