"""A langchain chat model for the tests: replies by rule, records every request.

langchain's own fake models (``FakeMessagesListChatModel``) refuse ``bind_tools``, which
``create_agent`` calls; :class:`ScriptedChat` is a ``BaseChatModel`` that accepts it and
answers by the conversation it is given, so the same model serves a run in this process,
a child process retried after SIGKILL and every replica of the service (it streams too,
a word at a time, when a streaming handler asks for it):

- while the current turn (what follows the last final answer) has fewer than ``rounds``
  tool results, it calls the tool ``work`` (its call id names the round);
- then it answers ``"answered: "`` and the turn's human texts joined by ``" | "``.

Every request is kept in :attr:`ScriptedChat.requests` and, with ``record_to``, appended
to that file as a JSON line (the replica harness's layout: ``replica``, ``turn``, each
message's ``id``, ``role``, ``text``, ``steered``, ``result``).
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from pydantic import Field

Hook = Callable[[list[BaseMessage]], Awaitable[None]]


def turn_part(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """The messages after the last final answer (an AI reply with no tool call)."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, AIMessage) and not message.tool_calls:
            return list(messages[index + 1 :])
    return list(messages)


class ScriptedChat(BaseChatModel):
    """See the module docstring."""

    rounds: int = 1
    record_to: str | None = None
    replica: str = ""
    requests: list[list[BaseMessage]] = Field(default_factory=list)
    on_answer: Hook | None = None  # awaited before the final answer is returned

    @property
    def _llm_type(self) -> str:
        return "scripted-chat"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChat:
        """The tools are the graph's business: the rules name ``work``."""
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        raise NotImplementedError("ScriptedChat is async: the graph runs with ainvoke")

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        reply = await self._reply(messages)
        return ChatResult(generations=[ChatGeneration(message=reply)])

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        """The same reply, a word at a time (a tool call comes as one chunk)."""
        reply = await self._reply(messages)
        if reply.tool_calls:
            calls = [
                {"name": c["name"], "args": json.dumps(c["args"]), "id": c["id"], "index": i}
                for i, c in enumerate(reply.tool_calls)
            ]
            chunk = AIMessageChunk(content="", tool_call_chunks=calls)  # type: ignore[arg-type]
            yield ChatGenerationChunk(message=chunk)
            return
        for piece in re.findall(r"\S+\s*", reply.text):
            yield ChatGenerationChunk(message=AIMessageChunk(content=piece))

    async def _reply(self, messages: list[BaseMessage]) -> AIMessage:
        self.requests.append(list(messages))
        self._record(messages)
        mine = turn_part(messages)
        results = sum(isinstance(m, ToolMessage) for m in mine)
        if results < self.rounds:
            call = {"name": "work", "args": {}, "id": f"call-{results + 1}", "type": "tool_call"}
            return AIMessage("", tool_calls=[call])
        if self.on_answer is not None:
            await self.on_answer(list(messages))
        texts = [m.text for m in mine if isinstance(m, HumanMessage)]
        return AIMessage("answered: " + " | ".join(texts))

    def _record(self, messages: Sequence[BaseMessage]) -> None:
        if self.record_to is None:
            return
        mine = turn_part(messages)
        humans = [m for m in mine if isinstance(m, HumanMessage)]
        steered = {m.id for m in humans[1:]}
        line = {
            "replica": self.replica,
            "turn": humans[0].id if humans else None,
            "messages": [_view(m, steered=m.id in steered) for m in messages],
        }
        with open(self.record_to, "a", encoding="utf-8") as file:  # one write: atomic append
            file.write(json.dumps(line) + "\n")


def _view(message: BaseMessage, *, steered: bool) -> dict[str, Any]:
    role = "assistant" if isinstance(message, AIMessage) else "user"
    return {
        "id": message.id,
        "role": role,
        "text": message.text,
        "steered": steered,
        "result": isinstance(message, ToolMessage),
        "type": message.type,
        "calls": [c["id"] for c in message.tool_calls] if isinstance(message, AIMessage) else [],
        "answers": message.tool_call_id if isinstance(message, ToolMessage) else None,
    }


def valid(messages: Sequence[BaseMessage]) -> bool:
    """Whether every AI tool call is answered by the ToolMessages right after it."""
    index = 0
    while index < len(messages):
        message = messages[index]
        index += 1
        if isinstance(message, AIMessage) and message.tool_calls:
            wanted = {c["id"] for c in message.tool_calls}
            while index < len(messages) and isinstance(messages[index], ToolMessage):
                wanted.discard(messages[index].tool_call_id)  # type: ignore[attr-defined]
                index += 1
            if wanted:
                return False
        elif isinstance(message, ToolMessage):
            return False
    return True
