"""Messages and their content parts.

A :class:`Message` is a ``role`` (``"user"`` or ``"assistant"``), a tuple of content parts
and a stable ``id``. The parts are :class:`Text`, :class:`ToolCall`, :class:`ToolResult`,
:class:`Reasoning` and :class:`Native` (a framework's own record, kept verbatim).
Everything here is immutable, so a transcript can be shared between the loop, a store and
the caller without copies.

A tool call's ``arguments`` is the raw JSON text the model produced. Nothing in steerable
parses and re-serializes it: it goes from the model to the store and back byte for byte.

Tool results travel in a ``"user"`` message, in the order of the calls they answer, right
after the assistant message that made the calls; that is how every provider we adapt to
expects them (Anthropic literally, OpenAI after a mechanical rename of the role).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from steerable.errors import InvalidMessage

Role = Literal["user", "assistant"]


def new_id() -> str:
    """A fresh message or steer id: 32 lowercase hex characters (128 random bits).

    ``os.urandom`` rather than ``uuid.uuid4()``: the same randomness at a third of the cost,
    and a step makes one or two.
    """
    return os.urandom(16).hex()


@dataclass(frozen=True, slots=True)
class Text:
    """Plain text."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A call the model asked for. ``arguments`` is the model's raw JSON text, untouched."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The result of the tool call ``call_id``; ``is_error`` when the tool failed."""

    call_id: str
    name: str
    content: str
    is_error: bool = False


@dataclass(frozen=True, slots=True)
class Reasoning:
    """The model's reasoning. ``data`` is the provider's own block, kept verbatim.

    Providers need some of it back unchanged on the next request (Anthropic's thinking
    blocks and their signatures, OpenAI's reasoning items): ``provider`` names whose it is
    and ``data`` holds it as the provider sent it, so a resumed conversation is accepted.
    """

    text: str
    provider: str = ""
    data: str = ""


@dataclass(frozen=True, slots=True)
class Native:
    """A message as an agent framework records it, kept verbatim.

    An integration (:mod:`steerable.integrations`) stores a framework's conversation in a
    steerable store as it is: ``framework`` names whose record it is (``"openai-agents"``,
    ``"pydantic-ai"``, ``"langgraph"``, ``"adk"``), ``data`` is the record as that
    framework serialises it (JSON text, never parsed by steerable), and ``text`` is what a
    person reads of it (the listings, the HTTP API). steerable's own models skip it.

    The service reads a stored turn that ends with an assistant message holding no
    :class:`ToolCall` as answered; so an integration stores a reply's tool calls together
    with their results (at the next step), never a call alone as the last message.
    """

    framework: str
    data: str
    text: str = ""


Part = Text | ToolCall | ToolResult | Reasoning | Native
_PARTS: tuple[type, ...] = (Text, ToolCall, ToolResult, Reasoning, Native)


@dataclass(frozen=True, slots=True)
class Message:
    """One message of a transcript.

    ``steered`` marks a user message that joined a running turn as a steer; its ``id`` is
    the steer's id, which is how a steer is recorded at most once in a transcript.
    """

    role: Role
    parts: tuple[Part, ...]
    id: str = field(default_factory=new_id)
    steered: bool = False

    def __post_init__(self) -> None:
        if self.role not in ("user", "assistant"):
            raise InvalidMessage(f"a message's role is 'user' or 'assistant', not {self.role!r}")
        parts: object = self.parts
        if not isinstance(parts, tuple):  # a list is fine to pass; keep the message immutable
            object.__setattr__(self, "parts", tuple(self.parts))
        for part in self.parts:
            if not isinstance(part, _PARTS):
                raise InvalidMessage(f"not a content part: {part!r}")
        message_id: object = self.id
        if not isinstance(message_id, str) or not message_id or "\x00" in message_id:
            # no NUL: ids are keys in every store, and some (Postgres text) cannot hold it
            raise InvalidMessage(f"a message id is a non-empty str without NUL, not {self.id!r}")

    @property
    def text(self) -> str:
        """The message's text parts, joined."""
        return "".join(p.text for p in self.parts if isinstance(p, Text))

    @property
    def readable(self) -> str:
        """What a person reads of the message: its text, or its :class:`Native` records'."""
        return "".join(p.text for p in self.parts if isinstance(p, Text | Native))

    def natives(self, framework: str) -> list[Native]:
        """The message's :class:`Native` records of ``framework``, in order."""
        return [p for p in self.parts if isinstance(p, Native) and p.framework == framework]

    @property
    def tool_calls(self) -> list[ToolCall]:
        """The tool calls of this message, in order."""
        return [p for p in self.parts if isinstance(p, ToolCall)]

    @property
    def tool_results(self) -> list[ToolResult]:
        """The tool results of this message, in order."""
        return [p for p in self.parts if isinstance(p, ToolResult)]


def user(text: str, *, id: str | None = None) -> Message:
    """A user message of plain text."""
    return Message("user", (Text(text),), id=id or new_id())


def assistant(text: str, *, id: str | None = None) -> Message:
    """An assistant message of plain text."""
    return Message("assistant", (Text(text),), id=id or new_id())


def transcript_problems(messages: Sequence[Message]) -> list[str]:
    """What a provider would reject in ``messages``; an empty list when it is valid.

    Checked: ids are unique; every tool call is answered, in the very next message, by a
    result with its id and nothing else comes between; no result answers a call that was
    not made just before; a tool call only in an assistant message, a result only in a
    user message. A transcript may end with an assistant message (see the docs on resuming).
    """
    problems: list[str] = []
    seen: set[str] = set()
    open_calls: dict[str, str] = {}
    for index, message in enumerate(messages):
        if message.id in seen:
            problems.append(f"message {index}: id {message.id!r} appears twice")
        seen.add(message.id)
        results = message.tool_results
        if open_calls:
            answered = {r.call_id for r in results}
            missing = [c for c in open_calls if c not in answered]
            if missing:
                problems.append(f"message {index}: tool calls {missing} have no result")
        for result in results:
            if message.role != "user":
                problems.append(f"message {index}: a tool result in an assistant message")
            elif result.call_id not in open_calls:
                problems.append(f"message {index}: result for {result.call_id!r} answers no call")
        calls = message.tool_calls
        if calls and message.role != "assistant":
            problems.append(f"message {index}: a tool call in a user message")
        open_calls = {c.id: c.name for c in calls}
    if open_calls:
        problems.append(f"the transcript ends with tool calls {list(open_calls)} unanswered")
    return problems


def texts(messages: Iterable[Message]) -> list[str]:
    """The text of each message, in order; handy in tests and examples."""
    return [m.text for m in messages]
