"""A steerable transcript as AG-UI messages (the MESSAGES_SNAPSHOT's list).

steerable keeps tool results as parts of a user message; AG-UI has a message per result
(role ``tool``). Each result is named ``{call id}.result`` here and in the live
TOOL_CALL_RESULT, so the snapshot and the live events agree on it.
"""

from __future__ import annotations

from ag_ui.core import (
    AssistantMessage,
    FunctionCall,
    Message,
    ToolCall,
    ToolMessage,
    UserMessage,
)

from steerable.messages import Message as Stored
from steerable.messages import Text, ToolResult
from steerable.messages import ToolCall as StoredCall
from steerable.service import Service
from steerable.service._service import MAX_PAGE

__all__ = ["agui_messages", "read_all", "result_id", "text_of"]


def result_id(call: str) -> str:
    """The AG-UI message id of the result of tool call ``call``."""
    return f"{call}.result"


def text_of(message: Stored) -> str:
    """The text parts of ``message``, joined."""
    return "".join(part.text for part in message.parts if isinstance(part, Text))


def agui_message(message: Stored) -> list[Message]:
    """``message`` as AG-UI messages: an assistant's reply with its tool calls, a user's
    text, one tool message per tool result."""
    if message.role == "assistant":
        calls = [
            ToolCall(id=p.id, function=FunctionCall(name=p.name, arguments=p.arguments))
            for p in message.parts
            if isinstance(p, StoredCall)
        ]
        return [
            AssistantMessage(
                id=message.id, content=text_of(message) or None, tool_calls=calls or None
            )
        ]
    out: list[Message] = []
    results = [p for p in message.parts if isinstance(p, ToolResult)]
    for result in results:
        error = result.content if result.is_error else None
        out.append(
            ToolMessage(
                id=result_id(result.call_id),
                content=result.content,
                tool_call_id=result.call_id,
                error=error,
            )
        )
    text = text_of(message)
    if text or not results:
        out.append(UserMessage(id=message.id, content=text))
    return out


def agui_messages(messages: list[Stored]) -> list[Message]:
    """A transcript as AG-UI messages, in order."""
    return [out for message in messages for out in agui_message(message)]


async def read_all(service: Service, session: str) -> list[Stored]:
    """The whole transcript of ``session``, a page at a time."""
    found: list[Stored] = []
    after = -1
    while True:
        page = await service.transcript(session, after=after, limit=MAX_PAGE)
        found.extend(entry.message for entry in page)
        if len(page) < MAX_PAGE:
            return found
        after = page[-1].position
