"""The SDK's input items and steerable messages, one for one.

An item the run produced is kept verbatim: a :class:`~steerable.Native` part of framework
``"openai-agents"`` whose ``data`` is the item's JSON exactly as the SDK gave it. A plain
user item (``{"role": "user", "content": "..."}``, what the SDK makes of a string prompt)
is a steerable user message instead, so a prompt and a steer read the same in the store
and in every listing. Rebuilding goes the other way; a message another agent stored (say
steerable's own loop) becomes a plain text item of its role, which the SDK accepts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, cast

from agents import TResponseInputItem

from steerable.messages import Message, Native, Role, Text, new_id

FRAMEWORK = "openai-agents"

# Items a user (or the tools, on the user's side of the exchange) contributes; every other
# item type is something the model produced, so it is stored as the assistant's.
_USER_ROLES = frozenset({"user", "system", "developer"})


def _as_dict(item: object) -> dict[str, Any]:
    if isinstance(item, Mapping):
        return dict(item)
    dump = getattr(item, "model_dump", None)  # an SDK pydantic object, handed over as is
    if callable(dump):
        return cast(dict[str, Any], dump(mode="json", exclude_unset=True))
    raise TypeError(f"not an input item: {type(item).__name__}")


def _is_plain_user(item: Mapping[str, Any]) -> bool:
    return (
        set(item) == {"role", "content"}
        and item["role"] == "user"
        and isinstance(item["content"], str)
    )


def _role(item: Mapping[str, Any]) -> Role:
    role = item.get("role")
    if role in _USER_ROLES:
        return "user"
    if role == "assistant":
        return "assistant"
    kind = str(item.get("type", ""))
    return "user" if kind.endswith("_output") else "assistant"


def item_text(item: Mapping[str, Any]) -> str:
    """What a person reads of ``item`` (a listing's line, never sent to a model)."""
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    kind = item.get("type")
    if kind == "function_call":
        return f"{item.get('name')}({item.get('arguments', '')})"
    output = item.get("output")
    if isinstance(output, str):
        return output
    return str(kind or "")


def to_message(item: object) -> Message:
    """The stored form of one input item (see the module docstring)."""
    data = _as_dict(item)
    if _is_plain_user(data):
        return Message("user", (Text(data["content"]),), id=new_id())
    native = Native(FRAMEWORK, json.dumps(data, ensure_ascii=False), item_text(data))
    return Message(_role(data), (native,), id=new_id())


def to_item(message: Message) -> TResponseInputItem:
    """The input item ``message`` stands for: its own record, or a plain text item."""
    for part in message.parts:
        if isinstance(part, Native) and part.framework == FRAMEWORK:
            return cast(TResponseInputItem, json.loads(part.data))
    return cast(TResponseInputItem, {"role": message.role, "content": message.text})


def same_item(a: object, b: object) -> bool:
    """Whether two items are one, ignoring the bookkeeping the SDK may add or drop on the way
    between its input and its session (an item's ``id``, ``status``)."""
    try:
        left, right = _as_dict(a), _as_dict(b)
    except TypeError:
        return False
    for volatile in ("id", "status"):
        left.pop(volatile, None)
        right.pop(volatile, None)
    return left == right
