"""The SDK's input items and steerable messages, one for one.

An item the run produced is kept verbatim: a :class:`~steerable.Native` part of framework
``"openai-agents"`` whose ``data`` is the item's JSON exactly as the SDK gave it. A plain
user item (``{"role": "user", "content": "..."}``, what the SDK makes of a string prompt)
is a steerable user message instead, so a prompt and a steer read the same in the store
and in every listing. Rebuilding goes the other way; a message another agent stored (say
steerable's own loop) becomes a plain text item of its role, which the SDK accepts.

A tool call and its output are also read by steerable itself: the calls of one response are
one assistant message (their records, and a :class:`~steerable.ToolCall` view of each), the
outputs after them one user message (records, and a :class:`~steerable.ToolResult` each), so
:func:`steerable.transcript_problems` checks a stored transcript and the service never reads
a trailing call as an answer. The views are never sent: rebuilding reads the records only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, cast

from agents import TResponseInputItem

from steerable.errors import InvalidMessage
from steerable.messages import Message, Native, Part, Role, Text, ToolCall, ToolResult, new_id

FRAMEWORK = "openai-agents"

# Items a user (or the tools, on the user's side of the exchange) contributes; every other
# item type is something the model produced, so it is stored as the assistant's.
_USER_ROLES = frozenset({"user", "system", "developer"})

# The item types of a call the run answers with a ``<type>_output`` item of its call_id (a
# hosted tool's item, say ``web_search_call``, is the model's own: nothing answers it).
_CALLS = frozenset(
    {"function_call", "custom_tool_call", "computer_call", "local_shell_call", "shell_call"}
)
_OUTPUTS = frozenset(f"{kind}_output" for kind in _CALLS)


def as_dict(item: object) -> dict[str, Any]:
    """``item`` as a dict (an SDK object as its JSON); not an item: InvalidMessage."""
    if isinstance(item, Mapping):
        return dict(item)
    dump = getattr(item, "model_dump", None)  # an SDK pydantic object, handed over as is
    if callable(dump):
        return cast(dict[str, Any], dump(mode="json", exclude_unset=True))
    raise InvalidMessage(f"not an input item: {type(item).__name__}")


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


def _tool_side(item: Mapping[str, Any]) -> str | None:
    """``"call"``, ``"output"`` or None: which side of a tool exchange ``item`` is."""
    if not isinstance(item.get("call_id"), str):
        return None
    kind = item.get("type")
    return "call" if kind in _CALLS else "output" if kind in _OUTPUTS else None


def _record(data: Mapping[str, Any]) -> Native:
    return Native(FRAMEWORK, json.dumps(data, ensure_ascii=False), item_text(data))


def to_messages(items: Sequence[object], names: Mapping[str, str] | None = None) -> list[Message]:
    """The stored form of ``items`` (see the module docstring): one message per item, but a
    run of calls is one message and so is the run of their outputs. ``names`` gives the tool
    name of a call stored before (an output's own item does not say it)."""
    messages: list[Message] = []
    known = dict(names or {})
    run: list[dict[str, Any]] = []  # the current run of calls, or of outputs
    side: str | None = None

    def end_run() -> None:
        if not run:
            return
        views: list[Part] = []
        for data in run:
            call_id = data["call_id"]
            if side == "call":
                views.append(ToolCall(call_id, known[call_id], str(data.get("arguments", ""))))
            else:
                output = data.get("output")
                content = output if isinstance(output, str) else json.dumps(output)
                views.append(ToolResult(call_id, known.get(call_id, ""), content))
        role: Role = "assistant" if side == "call" else "user"
        messages.append(Message(role, (*map(_record, run), *views), id=new_id()))
        run.clear()

    for item in items:
        data = as_dict(item)
        this = _tool_side(data)
        if this != side:
            end_run()
            side = this
        if this is None:
            messages.append(_single(data))
            continue
        if this == "call":
            known[data["call_id"]] = str(data.get("name", data.get("type")))
        run.append(data)
    end_run()
    return messages


def _single(data: dict[str, Any]) -> Message:
    if _is_plain_user(data):
        return Message("user", (Text(data["content"]),), id=new_id())
    return Message(_role(data), (_record(data),), id=new_id())


def call_names(items: Sequence[object]) -> dict[str, str]:
    """Each call's tool name by call id, of the calls among ``items``."""
    calls = (as_dict(item) for item in items)
    return {
        d["call_id"]: str(d.get("name", d.get("type"))) for d in calls if _tool_side(d) == "call"
    }


def answered(items: Sequence[object]) -> int:
    """How many of ``items`` to store now: all, but from the first call that no item of them
    answers (the call of a tool that waits for approval, say: a provider refuses a call
    without its output, so it is kept back until the output comes)."""
    dicts = [as_dict(item) for item in items]
    outputs = {d["call_id"] for d in dicts if _tool_side(d) == "output"}
    for index, data in enumerate(dicts):
        if _tool_side(data) == "call" and data["call_id"] not in outputs:
            return index
    return len(dicts)


def to_items(message: Message) -> list[TResponseInputItem]:
    """The input items ``message`` stands for: its own records, or one plain text item."""
    records = message.natives(FRAMEWORK)
    if records:
        return [cast(TResponseInputItem, json.loads(p.data)) for p in records]
    return [cast(TResponseInputItem, {"role": message.role, "content": message.text})]


def same_item(a: object, b: object) -> bool:
    """Whether two items are one, ignoring the bookkeeping the SDK may add or drop on the way
    between its input and its session (an item's ``id``, ``status``)."""
    try:
        left, right = as_dict(a), as_dict(b)
    except InvalidMessage:
        return False
    for volatile in ("id", "status"):
        left.pop(volatile, None)
        right.pop(volatile, None)
    return left == right


def checked(item: object) -> dict[str, Any]:
    """``item`` as a dict whose JSON can be stored, else InvalidMessage (nothing stored)."""
    data = as_dict(item)
    try:
        json.dumps(data, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise InvalidMessage(f"an input item that is not JSON cannot be stored: {exc}") from None
    return data


def orphan_outputs(items: Sequence[object]) -> int:
    """How many of the first ``items`` are tool outputs whose call is not among ``items`` (a
    history cut to its latest items can begin in the middle of a call and its outputs; a
    provider refuses such an output)."""
    dicts = [as_dict(item) for item in items]
    calls = {d["call_id"] for d in dicts if _tool_side(d) == "call"}
    count = 0
    for data in dicts:
        if _tool_side(data) != "output" or data["call_id"] in calls:
            break
        count += 1
    return count


def pending_calls(items: Sequence[object]) -> list[dict[str, Any]]:
    """The calls ``items`` end with (their outputs never came: a crash after the reply that
    made them was stored, before the outputs were), in order."""
    dicts = [as_dict(item) for item in items]
    start = len(dicts)
    while start and _tool_side(dicts[start - 1]) == "call":
        start -= 1
    return dicts[start:]
