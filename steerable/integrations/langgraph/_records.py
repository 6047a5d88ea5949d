"""LangGraph's messages in a steerable transcript, and back.

The stored transcript is the truth, in one layout:

- a user's plain-text message (the prompt, a steer: a HumanMessage of text and nothing
  else) is a steerable user message of its own id, so each input appears once, under the
  id the service and the store know;
- every other message of the graph (the model's replies, tool calls and their results, a
  human message of content blocks or with ``additional_kwargs``, a name or metadata, such
  as the summary langchain's ``SummarizationMiddleware`` adds) is kept verbatim, as
  langchain serialises it (``message_to_dict``), in a :class:`~steerable.Native` part
  named ``"langgraph"``, under the message's own id.

Reading it back gives the same langchain messages with the same ids, so LangGraph's
``add_messages`` recognises them (an id it holds already is replaced, never added twice).
Messages another agent stored (steerable's own text, tool calls and results) become their
langchain twins, so a session can move to LangGraph.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    ToolMessage,
    message_to_dict,
    messages_from_dict,
)

from steerable.errors import UsageError
from steerable.messages import Message, Native, Role, Text, ToolCall

FRAMEWORK = "langgraph"
"""The ``framework`` of the Native parts this integration stores."""


def _json_default(value: object) -> str:
    # A tool's artifact may be any object; langchain keeps it in memory only, and a
    # transcript needs JSON: what is not JSON is kept as its str (documented).
    return str(value)


def to_stored(message: BaseMessage) -> Message:
    """``message`` as the stored transcript keeps it (its id must be set)."""
    if not message.id:
        raise UsageError(f"a LangGraph message to store has an id: {message!r}")
    if _plain_text(message):
        return Message("user", (Text(message.text),), id=message.id)
    role: Role = "assistant" if isinstance(message, AIMessage) else "user"
    data = json.dumps(message_to_dict(message), default=_json_default, ensure_ascii=False)
    return Message(role, (Native(FRAMEWORK, data, message.text),), id=message.id)


def _plain_text(message: BaseMessage) -> bool:
    # Only a human message that is its text and nothing more is an input (a prompt, a
    # steer): a summary SummarizationMiddleware adds is a HumanMessage marked in
    # additional_kwargs, and stored as plain text it would pass for the user's words.
    return (
        isinstance(message, HumanMessage)
        and isinstance(message.content, str)
        and not message.additional_kwargs
        and not message.response_metadata
        and message.name is None
    )


def from_stored(messages: Iterable[Message]) -> list[AnyMessage]:
    """The langchain messages of a stored transcript, with the ids :func:`rebuilt_ids` gives."""
    rebuilt: list[AnyMessage] = []
    for message in messages:
        rebuilt.extend(_from_stored(message))
    return rebuilt


def rebuilt_ids(message: Message) -> list[str]:
    """The ids of the langchain messages :func:`from_stored` rebuilds ``message`` to, in order.

    Our own records and every plain message keep the stored id; a message of steerable's
    own loop holding several tool results becomes one ToolMessage per result, each
    ``"<id>:<call id>"``. Whatever asks "is this langchain message stored?" asks this, so a
    transcript another agent wrote is neither stored again nor cut short.
    """
    natives = message.natives(FRAMEWORK)
    if len(natives) > 1:  # not written by us; still one id each, and stable
        return [f"{message.id}:{index}" for index in range(len(natives))]
    if natives:
        return [message.id]
    results = message.tool_results
    if results:
        return [f"{message.id}:{r.call_id}" for r in results]
    return [message.id]


def stored_ids(messages: Iterable[Message]) -> set[str]:
    """Every id :func:`rebuilt_ids` gives for ``messages``."""
    return {id for message in messages for id in rebuilt_ids(message)}


def _from_stored(message: Message) -> list[AnyMessage]:
    ids = rebuilt_ids(message)
    natives = message.natives(FRAMEWORK)
    if natives:
        loaded: list[Any] = messages_from_dict([json.loads(p.data) for p in natives])
        for record, id in zip(loaded, ids, strict=True):
            record.id = id  # ours hold this id already (to_stored); one rule for every reader
        return loaded
    results = message.tool_results
    if results:  # steerable's own loop: one message of results, one ToolMessage each
        return [
            ToolMessage(
                r.content,
                tool_call_id=r.call_id,
                name=r.name,
                status="error" if r.is_error else "success",
                id=id,
            )
            for r, id in zip(results, ids, strict=True)
        ]
    if message.role == "user":
        return [HumanMessage(message.text, id=message.id)]
    calls = [_tool_call(c) for c in message.tool_calls]
    return [AIMessage(message.text, tool_calls=calls, id=message.id)]


def _tool_call(call: ToolCall) -> dict[str, Any]:
    try:
        args = json.loads(call.arguments) if call.arguments else {}
    except ValueError:
        args = {}
    if not isinstance(args, dict):
        args = {}
    return {"name": call.name, "args": args, "id": call.id, "type": "tool_call"}


def steer_message(message: Message) -> HumanMessage:
    """The HumanMessage of a steer taken (its id the steer's, so a replay adds it once)."""
    return HumanMessage(message.text, id=message.id)


def unanswered_tail(messages: Sequence[BaseMessage]) -> int:
    """How many messages end ``messages`` after its last complete point.

    A run cut short (the recursion limit) may end with a reply whose tool calls have no
    result yet; a transcript must not, so that tail is left unstored.
    """
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, AIMessage) and any(
            call["id"] not in answered for call in message.tool_calls
        ):
            return len(messages) - index
    return 0
