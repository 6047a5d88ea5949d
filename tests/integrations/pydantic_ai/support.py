"""What the Pydantic AI tests share: a scripted FunctionModel, views of requests, checks."""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path

from pydantic_ai.messages import (
    SYNTHESIZED_TOOL_RETURN_METADATA_KEY,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryFeedbackPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

Reply = ModelResponse | Callable[[list[ModelMessage]], Awaitable[ModelResponse]]
"""A scripted reply: a response, or a coroutine function that gives one for a request."""

# Opens the test's SQLite file in a process of its own and steers the session there.
STEER = """
import asyncio, sys
from steerable import Session
from steerable.stores.sqlite import SQLiteStore

async def main():
    async with SQLiteStore(sys.argv[1]) as store:
        await Session(sys.argv[2], store).steer(sys.argv[3], id=sys.argv[4])

asyncio.run(main())
"""


async def steer_from_another_process(path: Path, session: str, text: str, id: str) -> None:
    """Leave a steer in ``session`` of the SQLite file ``path``, from a child process."""
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", STEER, str(path), session, text, id
    )
    assert await child.wait() == 0


def call(name: str, id: str, args: str = "{}") -> ModelResponse:
    """A reply that calls the tool ``name`` (call id ``id``)."""
    return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=id)])


def say(text: str) -> ModelResponse:
    """A reply of text: a final answer."""
    return ModelResponse(parts=[TextPart(text)])


class Script:
    """A FunctionModel that answers with ``replies`` in order and records every request.

    Asked for a stream, it streams the same reply: its text a word at a time, its tool calls
    whole. :attr:`streamed` says, for each request, whether it was streamed.
    """

    def __init__(self, *replies: Reply) -> None:
        self.replies = list(replies)
        self.requests: list[list[ModelMessage]] = []
        self.streamed: list[bool] = []
        self.model = FunctionModel(self._answer, stream_function=self._stream)

    async def _answer(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return await self._reply(messages, streamed=False)

    async def _stream(
        self, messages: list[ModelMessage], info: AgentInfo
    ) -> AsyncIterator[str | DeltaToolCalls]:
        reply = await self._reply(messages, streamed=True)
        texts = [p for p in reply.parts if isinstance(p, TextPart)]
        if len(texts) == len(reply.parts):
            for part in texts:
                for word in re.findall(r"\S+\s*", part.content):
                    yield word
            return
        calls = [p for p in reply.parts if isinstance(p, ToolCallPart)]
        if len(calls) != len(reply.parts):
            raise AssertionError("a FunctionModel stream is all text or all tool calls")
        yield {
            i: DeltaToolCall(c.tool_name, c.args_as_json_str(), tool_call_id=c.tool_call_id)
            for i, c in enumerate(calls)
        }

    async def _reply(self, messages: list[ModelMessage], *, streamed: bool) -> ModelResponse:
        self.requests.append(list(messages))
        self.streamed.append(streamed)
        if len(self.requests) > len(self.replies):
            raise AssertionError(f"request {len(self.requests)} has no scripted reply")
        reply = self.replies[len(self.requests) - 1]
        return reply if isinstance(reply, ModelResponse) else await reply(list(messages))

    def views(self) -> list[list[str]]:
        """Each request as :func:`view` shows it."""
        return [view(r) for r in self.requests]


def view(messages: Sequence[ModelMessage]) -> list[str]:
    """A request's parts, in order: ``user:TEXT``, ``call:ID``, ``return:ID``, ``say:TEXT``,
    ``retry:...`` (what a provider reads, flattened)."""
    out: list[str] = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, UserPromptPart):
                out.append(f"user:{part.content}")
            elif isinstance(part, ToolCallPart):
                out.append(f"call:{part.tool_call_id}")
            elif isinstance(part, ToolReturnPart):
                out.append(f"return:{part.tool_call_id}")
            elif isinstance(part, TextPart):
                out.append(f"say:{part.content}")
            elif isinstance(part, RetryFeedbackPart):
                out.append("retry")
    return out


def problems(messages: Sequence[ModelMessage]) -> list[str]:
    """What a provider would refuse in a history: a tool call whose return is not in the very
    next request, a return that answers no call of the response before it, two responses in a
    row, a history that starts with a response. Also a return Pydantic AI made up (its repair
    of a call left with none, before each request): the real return was lost."""
    found: list[str] = []
    calls: set[str] = set()
    previous: ModelMessage | None = None
    for index, message in enumerate(messages):
        if isinstance(message, ModelResponse):
            if previous is None or isinstance(previous, ModelResponse):
                found.append(f"{index}: a response that follows no request")
            if calls:
                found.append(f"{index}: calls {sorted(calls)} have no return")
            calls = {p.tool_call_id for p in message.parts if isinstance(p, ToolCallPart)}
        else:
            returns = {p.tool_call_id for p in message.parts if isinstance(p, ToolReturnPart)}
            made_up = [
                p.tool_call_id
                for p in message.parts
                if isinstance(p, ToolReturnPart)
                and (p.metadata or {}).get(SYNTHESIZED_TOOL_RETURN_METADATA_KEY)
            ]
            if made_up:
                found.append(f"{index}: returns {sorted(made_up)} were made up by the repair")
            if returns - calls:
                found.append(f"{index}: returns {sorted(returns - calls)} answer no call")
            calls -= returns
            if calls and isinstance(previous, ModelResponse):
                found.append(f"{index}: calls {sorted(calls)} have no return")
                calls = set()
        previous = message
    return found


def steers_in(messages: Sequence[ModelRequest | ModelResponse], text: str) -> int:
    """How many times the user text ``text`` is in ``messages``."""
    return view(messages).count(f"user:{text}")
