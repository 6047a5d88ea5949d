"""ScriptedModel: a deterministic model for tests and demos.

It answers each request with the next entry of its script and records every request it
received (``model.requests``), so a test can assert exactly what the model was sent.

A script entry is one of:

- a ``str``: a text answer, streamed word by word as text deltas;
- a :class:`ToolCall` (see :func:`call`) or a list of calls and strings: one reply;
- a :class:`Message`: sent as it is (it must be the assistant's);
- a :class:`Reply`: its message, as above, with its ``finish_reason`` (say ``"length"``
  for a reply cut by ``max_tokens``); its usage is the scripted model's own;
- a callable taking the :class:`ModelRequest` and returning (or awaiting to) any of the
  above: for replies that depend on what was asked, or that wait on a test's signal.

Asking past the end of the script raises :class:`ScriptExhausted`, which fails the run.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import TypeAlias

from steerable.errors import ScriptExhausted, UsageError
from steerable.messages import Message, Part, Text, ToolCall
from steerable.models.base import ModelEvent, ModelRequest, Reply, TextDelta, Usage

ReplyLike: TypeAlias = str | ToolCall | Message | Reply | Sequence[str | ToolCall]
ScriptEntry: TypeAlias = ReplyLike | Callable[[ModelRequest], ReplyLike | Awaitable[ReplyLike]]

_call_ids = itertools.count(1)
_words = re.compile(r"\S+\s*|\s+")


def call(name: str, arguments: str = "{}", *, id: str | None = None) -> ToolCall:
    """A tool call for a script; ``arguments`` is the raw JSON text the 'model' sends."""
    return ToolCall(id or f"call_{next(_call_ids)}", name, arguments)


def _message(entry: ReplyLike) -> Message:
    if isinstance(entry, Reply):
        entry = entry.message
    if isinstance(entry, Message):
        if entry.role != "assistant":
            raise UsageError("a scripted reply is the assistant's message")
        return entry
    items: Iterable[str | ToolCall] = (entry,) if isinstance(entry, str | ToolCall) else entry
    parts: list[Part] = [Text(i) if isinstance(i, str) else i for i in items]
    return Message("assistant", tuple(parts))


class ScriptedModel:
    """A model that replies from a script and records every request; see the module."""

    def __init__(
        self, script: Iterable[ScriptEntry], *, name: str = "scripted", delay: float = 0.0
    ) -> None:
        self._script = list(script)
        self._next = 0
        self._name = name
        self.delay = delay
        self.requests: list[ModelRequest] = []

    @property
    def name(self) -> str:
        """``"scripted"`` unless named otherwise."""
        return self._name

    @property
    def remaining(self) -> int:
        """How many script entries are left."""
        return len(self._script) - self._next

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Record ``request``, then stream the next scripted reply."""
        self.requests.append(request)
        if self._next >= len(self._script):
            raise ScriptExhausted(
                f"the script has {len(self._script)} replies and request"
                f" {len(self.requests)} asked for another"
            )
        entry = self._script[self._next]
        self._next += 1
        if callable(entry):
            produced = entry(request)
            entry = await produced if inspect.isawaitable(produced) else produced
        message = _message(entry)
        finish_reason = entry.finish_reason if isinstance(entry, Reply) else None
        if self.delay:
            await asyncio.sleep(self.delay)
        for part in message.parts:
            if isinstance(part, Text):
                for word in _words.findall(part.text):
                    yield TextDelta(word)
        usage = Usage(
            input_tokens=len(request.messages),  # one "token" a message: cheap and deterministic
            output_tokens=len(_words.findall(message.text)) + len(message.tool_calls),
            requests=1,
        )
        yield Reply(message, usage, finish_reason)
