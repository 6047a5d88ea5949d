"""Compaction: a session that outgrew its model's context, carried on from a summary.

:func:`compact` asks the model for a summary of the conversation so far and stores it as
one more message of the transcript, a user message holding the summary's text and a
:class:`Native` marker (``steerable.compaction``). Nothing is deleted: every store keeps
the original messages, readable as before (listings, the HTTP API, a fork). What changes
is what the model is sent: :func:`model_view` starts at the last compaction, so every
later request holds the summary and what came after it. Runs on steerable's own loop
(``Runner``, the service's ``ReActAgent``) read it; the framework integrations keep their
own records and do not.

A conversation too long to be summarized in one request (it is already past the context)
is summarized from its latest part: :func:`compact` renders the messages as plain text,
keeps the last ``max_chars`` of it, and halves that once more each time the server says
the request is too long for its context, up to three times.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from steerable.errors import ProviderError, UsageError
from steerable.messages import Message, Native, Text
from steerable.models.base import Model, ModelRequest, ModelSettings, Reply
from steerable.session import Session

__all__ = [
    "COMPACTION",
    "compact",
    "compaction_of",
    "is_context_overflow",
    "model_view",
]

COMPACTION = "steerable.compaction"
"""The :class:`Native` framework name that marks a message as a compaction."""

SUMMARY_HEAD = (
    "A summary of the conversation before this point (its messages are kept in full in the"
    " session's store, but no longer sent):\n\n"
)

_INSTRUCTIONS = (
    "You summarize a conversation between a user and an assistant (with its tool calls) so"
    " that the assistant can carry it on without the messages. Keep every fact, decision,"
    " name, number, file, open question and task the user asked for and its state; say what"
    " was being worked on last. Write plain prose and lists, no preamble."
)

_OVERFLOW_WORDS = (
    "context length",
    "context window",
    "context size",
    "maximum context",
    "exceeds the context",
    "too many tokens",
    "prompt is too long",
    "input is too long",
    "exceed_context",
    "context_length_exceeded",
)


def is_context_overflow(error: BaseException | None) -> bool:
    """Whether ``error`` is a server saying the request is longer than its model's context."""
    if not isinstance(error, ProviderError):
        return False
    text = error.message.lower()
    return any(words in text for words in _OVERFLOW_WORDS)


def compaction_of(message: Message) -> dict[str, object] | None:
    """The compaction's record (``covers``: how many messages it sums up), or None."""
    for part in message.natives(COMPACTION):
        record = json.loads(part.data)
        return record if isinstance(record, dict) else None
    return None


def model_view(messages: Sequence[Message]) -> Sequence[Message]:
    """What the model is sent of ``messages``: from the last compaction on (all, if none)."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == "user" and messages[index].natives(COMPACTION):
            return messages[index:]
    return messages


async def compact(
    session: Session,
    model: Model,
    *,
    settings: ModelSettings | None = None,
    max_chars: int = 400_000,
) -> Message:
    """Summarize ``session``'s conversation with ``model`` and store the summary; return it.

    Refused (:class:`UsageError`) when there is nothing to summarize since the last
    compaction, or when the transcript ends in the middle of a turn (a tool call without its
    result: finish or stop the turn first). The summary's request carries no tools. A server
    error other than a context overflow is raised as it is, and nothing is stored.
    """
    if max_chars < 1_000:
        raise UsageError(f"max_chars is 1000 or more, not {max_chars}")
    messages = await session.messages()
    view = model_view(messages)
    since = view[1:] if view and view[0].natives(COMPACTION) else view
    if not since:
        raise UsageError("nothing to compact: no message since the last compaction")
    if messages[-1].tool_calls:
        raise UsageError("the last turn is halfway (a tool call without its result)")
    text = _rendered(view)
    budget = max_chars
    for _ in range(4):
        kept = text if len(text) <= budget else "(the earlier part is left out)\n" + text[-budget:]
        try:
            summary = await _summary(model, kept, settings or ModelSettings())
            break
        except ProviderError as exc:
            if not is_context_overflow(exc) or budget <= 1_000:
                raise
            budget = max(1_000, min(budget, len(text)) // 2)
    else:  # pragma: no cover - the loop breaks or raises
        raise AssertionError("unreachable")
    record = json.dumps({"covers": len(messages)})
    message = Message(
        "user", (Text(SUMMARY_HEAD + summary.strip()), Native(COMPACTION, record, "compaction"))
    )
    await session.save([*messages, message])
    return message


async def _summary(model: Model, text: str, settings: ModelSettings) -> str:
    request = ModelRequest(
        _INSTRUCTIONS,
        (Message("user", (Text("The conversation:\n\n" + text),)),),
        (),
        settings,
    )
    reply: Reply | None = None
    async for event in model.stream(request):
        if isinstance(event, Reply):
            reply = event
    if reply is None or not reply.message.text.strip():
        raise ProviderError(getattr(model, "provider", "model"), "the summary came back empty")
    return reply.message.text


def _rendered(messages: Sequence[Message]) -> str:
    """The conversation as plain text, a block a message."""
    blocks: list[str] = []
    for message in messages:
        lines: list[str] = []
        if message.text:
            who = "User" if message.role == "user" else "Assistant"
            lines.append(f"{who}: {message.text}")
        for call in message.tool_calls:
            lines.append(f"Assistant called {call.name}({call.arguments})")
        for result in message.tool_results:
            failed = " (failed)" if result.is_error else ""
            lines.append(f"{result.name} returned{failed}: {result.content}")
        if lines:
            blocks.append("\n".join(lines))
    return "\n\n".join(blocks)
