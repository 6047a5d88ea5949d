"""The stored form of messages and steers: one versioned JSON text per message.

Every store keeps a message as its id, its position and :func:`encode`'s text, and turns it
back with :func:`decode`. The text is JSON with a version key ``"v"``; a store never looks
inside it. A tool call's raw arguments are a JSON *string* value inside it, so they come
back byte for byte whatever they hold (duplicate keys, odd spacing, invalid JSON even).

Version 1::

    {"v":1,"role":"user","steered":true,"parts":[
        {"t":"text","text":"..."},
        {"t":"call","id":"...","name":"...","args":"<raw JSON text>"},
        {"t":"result","id":"...","name":"...","content":"...","error":false},
        {"t":"reasoning","text":"...","provider":"...","data":"..."},
        {"t":"native","framework":"...","data":"<the framework's JSON text>","text":"..."}]}

``json`` escapes every control character, NUL included, so the stored text holds none and
every backend can keep it. Text that is not valid Unicode (a lone surrogate) cannot be
stored anywhere faithfully and is refused with :class:`InvalidMessage`.
"""

from __future__ import annotations

import json
from typing import Any

from steerable.errors import CorruptRecord, InvalidMessage
from steerable.messages import Message, Native, Part, Reasoning, Text, ToolCall, ToolResult

VERSION = 1

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), check_circular=False).encode
_dumps_ascii = json.JSONEncoder(separators=(",", ":"), check_circular=False).encode
"""The same encoder escaping every non-ASCII character (``\\uXXXX``): CPython's is about 40%
faster. Where its text holds no ``\\u``, it escaped nothing that way, so it is exactly
:data:`_dumps`' text; else :func:`encode` uses :data:`_dumps`."""
_loads = json.loads


def _part(part: Part) -> dict[str, Any]:
    if isinstance(part, Text):
        return {"t": "text", "text": part.text}
    if isinstance(part, ToolCall):
        return {"t": "call", "id": part.id, "name": part.name, "args": part.arguments}
    if isinstance(part, ToolResult):
        return {
            "t": "result",
            "id": part.call_id,
            "name": part.name,
            "content": part.content,
            "error": part.is_error,
        }
    if isinstance(part, Native):
        return {"t": "native", "framework": part.framework, "data": part.data, "text": part.text}
    return {"t": "reasoning", "text": part.text, "provider": part.provider, "data": part.data}


def encode(message: Message) -> str:
    """The stored text of ``message`` (its id and position are kept beside it, not in it)."""
    body: dict[str, Any] = {"v": VERSION, "role": message.role}
    if message.steered:
        body["steered"] = True
    body["parts"] = [_part(p) for p in message.parts]
    try:
        text: str = _dumps_ascii(body)
        if "\\u" not in text:  # nothing escaped as \\uXXXX: all ASCII, so no lone surrogate
            return text
        text = _dumps(body)
    except TypeError as exc:
        raise InvalidMessage(
            f"message {message.id!r} holds a value that is not text: {exc}"
        ) from exc
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidMessage(
            f"message {message.id!r} holds text that is not valid Unicode ({exc.reason} at"
            f" {exc.start}); no store can keep it faithfully"
        ) from None
    return text


def _decode_part(raw: dict[str, Any]) -> Part:
    kind = raw["t"]
    if kind == "text":
        return Text(raw["text"])
    if kind == "call":
        return ToolCall(raw["id"], raw["name"], raw["args"])
    if kind == "result":
        return ToolResult(raw["id"], raw["name"], raw["content"], bool(raw["error"]))
    if kind == "reasoning":
        return Reasoning(raw["text"], raw["provider"], raw["data"])
    if kind == "native":
        return Native(raw["framework"], raw["data"], raw["text"])
    raise ValueError(f"unknown part kind {kind!r}")


def decode(id: str, text: str | bytes, *, where: str = "") -> Message:
    """The message stored as ``text`` under ``id``; :class:`CorruptRecord` if it is not one.

    ``where`` names the row in the error (``"session 's', position 4"``, say).
    """
    try:
        body = _loads(text)
        version = body["v"]
        if version != VERSION:
            raise ValueError(f"unknown codec version {version!r} (this steerable reads {VERSION})")
        parts = tuple(_decode_part(p) for p in body["parts"])
        return Message(body["role"], parts, id=id, steered=bool(body.get("steered", False)))
    except (ValueError, KeyError, TypeError, InvalidMessage) as exc:
        label = f" at {where}" if where else ""
        raise CorruptRecord(f"stored message {id!r}{label} cannot be read: {exc}") from exc
