"""Pydantic AI's messages as steerable messages, and back.

Each :class:`~pydantic_ai.messages.ModelMessage` a run adds is stored as one steerable
:class:`~steerable.Message` holding it verbatim in a :class:`~steerable.Native` part (the JSON
of Pydantic AI's own ``ModelMessagesTypeAdapter``, a list of that one message). Beside it, a
view steerable itself reads: a response's text and tool calls, a request's tool results. They
let the service tell a final answer from a step (its last message has text and no tool call)
and let :func:`steerable.transcript_problems` check the stored transcript; the loader never
reads them, only the Native record.

Two kinds of input are steerable's own user messages instead, each under its own id: a
turn's prompt (its text, plus the request Pydantic AI built for it, verbatim) and a steer
(plain text, ``steered``; Pydantic AI's copy of it is never stored, so it is fed once). A
steer comes back as the request :func:`steer_request` builds, marked in its ``metadata``.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from steerable.errors import InvalidMessage
from steerable.messages import Message, Native, Part, Text, ToolCall, ToolResult, new_id

FRAMEWORK = "pydantic-ai"
"""The ``framework`` of the :class:`~steerable.Native` parts this integration stores."""

STEER_KEY = "steerable_steer"
"""The ``metadata`` key of a request that carries a steer: its value is the steer's id."""


def steer_request(message: Message) -> ModelRequest:
    """The request that carries the steered user message ``message`` to the model."""
    return ModelRequest(parts=[UserPromptPart(message.text)], metadata={STEER_KEY: message.id})


def steer_id(message: ModelMessage) -> str | None:
    """The steer id a request made by :func:`steer_request` carries, else None."""
    if not isinstance(message, ModelRequest) or not message.metadata:
        return None
    value = message.metadata.get(STEER_KEY)
    return value if isinstance(value, str) else None


def record(message: ModelMessage, *, id: str | None = None, prompt: bool = False) -> Message:
    """``message`` as a steerable message (under ``id``, or a new one), kept verbatim.

    ``prompt`` marks the request that carries a turn's prompt: its user text is a Text part
    too, so steerable reads it as the turn's prompt.
    """
    data = ModelMessagesTypeAdapter.dump_json([message]).decode()
    parts: list[Part] = []
    if isinstance(message, ModelResponse):
        text = message.text or ""
        if text:
            parts.append(Text(text))
        parts.extend(
            ToolCall(p.tool_call_id, p.tool_name, p.args_as_json_str())
            for p in message.parts
            if isinstance(p, ToolCallPart)
        )
        parts.append(Native(FRAMEWORK, data, text or _summary(message)))
        return Message("assistant", tuple(parts), id=id or new_id())
    said = _user_text(message)
    if prompt and said:
        parts.append(Text(said))
    parts.extend(
        ToolResult(p.tool_call_id, p.tool_name, p.model_response_str())
        for p in message.parts
        if isinstance(p, ToolReturnPart)
    )
    parts.append(Native(FRAMEWORK, data, said or _summary(message)))
    return Message("user", tuple(parts), id=id or new_id())


def history(messages: Sequence[Message]) -> list[ModelMessage]:
    """The Pydantic AI history a stored transcript gives, one model message per message.

    A message with a Pydantic AI record gives that record; a steered message, its steer
    request; any other message (written by steerable's own loop, say), its text.
    """
    return [model_message(message) for message in messages]


def model_message(message: Message) -> ModelMessage:
    """The Pydantic AI message that ``message`` stores (see :func:`history`)."""
    native = message.natives(FRAMEWORK)
    if native:
        loaded = ModelMessagesTypeAdapter.validate_json(native[0].data)
        if len(loaded) != 1:
            raise InvalidMessage(f"message {message.id!r}: a pydantic-ai record holds one message")
        return loaded[0]
    if message.steered:
        return steer_request(message)
    if message.role == "assistant":
        calls = [ToolCallPart(c.name, c.arguments, tool_call_id=c.id) for c in message.tool_calls]
        return ModelResponse(parts=[*([TextPart(message.text)] if message.text else []), *calls])
    returns = [
        ToolReturnPart(r.name, r.content, tool_call_id=r.call_id) for r in message.tool_results
    ]
    return ModelRequest(parts=[*returns, *([UserPromptPart(message.text)] if message.text else [])])


def revision(messages: Sequence[Message]) -> str:
    """The revision of a stored transcript, as :class:`SteerableConversationStore` tells it:
    its length and last message id."""
    return f"{len(messages)}:{messages[-1].id}" if messages else "0:"


def _user_text(request: ModelRequest) -> str:
    return "\n".join(
        p.content
        for p in request.parts
        if isinstance(p, UserPromptPart) and isinstance(p.content, str)
    )


def _summary(message: ModelMessage) -> str:
    """What a person reads of a record with no text: the tools it calls or answers."""
    if isinstance(message, ModelResponse):
        calls = [p.tool_name for p in message.parts if isinstance(p, ToolCallPart)]
        return f"calls {', '.join(calls)}" if calls else ""
    returns = [p.tool_name for p in message.parts if isinstance(p, ToolReturnPart)]
    return f"results of {', '.join(returns)}" if returns else ""
