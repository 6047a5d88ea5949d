"""Orphaned tool calls, repaired: a transcript a provider would reject made valid again.

A provider wants every tool call answered by a result in the very next message, and no
result that answers nothing. A transcript can break that when a framework integration, an
older version, a hand edit or a crash between a reply and its results left a call without
a result and the conversation then went on (a new prompt appended after it), or left a
result of a call nobody made. Peers brick such a session: every later request fails.

:func:`plan_repair` finds the first broken place and rewrites the transcript from there:

- a call with no result gets an error result saying its outcome is unknown
  (:data:`ORPHANED`): in the message of results that follows it (its results then in call
  order, a result given twice kept once), or in a new message of results put right after
  the call when none follows;
- a result that answers no call of the message before it is dropped (a message left with
  nothing is dropped too);
- nothing else changes: every other message, part and id stays as it was.

A reply with calls at the very end of the transcript is not broken: its calls are pending,
and a run carries them on (runs them, or takes their results from the tool journal).

The run (:mod:`steerable.loop`) repairs what it is given before its first step and, with
a session, stores the repair with one compare-and-swap of the tail
(:class:`steerable.store.Repairable`), so the next load repairs nothing; the repair is
reported in a :class:`~steerable.events.Repaired` event. The repair is deterministic (the
added messages' ids come from the calls' message), so two replicas repairing one session
write the same thing, and the swap lets one of them do it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from steerable.messages import Message, ToolCall, ToolResult

__all__ = ["ORPHANED", "Repair", "plan_repair"]

ORPHANED = (
    "this call has no recorded result: its outcome is unknown (it may or may not have run)."
    " Check its effect before calling it again."
)
"""The error result given to a tool call that has none."""


@dataclass(frozen=True, slots=True)
class Repair:
    """The messages from position ``at`` on (their ids ``old``) become ``messages``;
    ``problems`` says what was wrong, a sentence each."""

    at: int
    old: tuple[str, ...]
    messages: tuple[Message, ...]
    problems: tuple[str, ...]


def plan_repair(transcript: Sequence[Message]) -> Repair | None:
    """The repair ``transcript`` needs, or None when a provider would take it as it is."""
    fixed: list[Message] = []
    problems: list[str] = []
    ids = {m.id for m in transcript}
    calls: list[ToolCall] = []  # the calls of the message before, waiting for their results
    for index, message in enumerate(transcript):
        if calls and not (message.role == "user" and message.tool_results):
            answer = _unknown(calls, _free_id(f"{fixed[-1].id}.results", ids))
            problems.append(f"message {index}: calls {[c.id for c in calls]} had no results")
            fixed.append(answer)
            calls = []
        mended = _answered(message, calls, index, problems) if message.tool_results else message
        if mended is not None:
            fixed.append(mended)
        calls = message.tool_calls if message.role == "assistant" else []
    at = next(
        (i for i, (a, b) in enumerate(zip(transcript, fixed, strict=False)) if a is not b),
        min(len(transcript), len(fixed)),
    )
    if at == len(transcript) == len(fixed):
        return None
    return Repair(at, tuple(m.id for m in transcript[at:]), tuple(fixed[at:]), tuple(problems))


def _answered(
    message: Message, calls: list[ToolCall], index: int, problems: list[str]
) -> Message | None:
    """``message`` (it holds results) answering exactly ``calls``, in their order, or None
    when nothing of it is left."""
    if message.role != "user":
        return message  # a result in a reply: not ours to judge; transcript_problems says it
    results: dict[str, ToolResult] = {}
    for result in message.tool_results:
        results.setdefault(result.call_id, result)
    asked = {c.id for c in calls}
    stray = [r.call_id for r in message.tool_results if r.call_id not in asked]
    if stray:
        problems.append(f"message {index}: results {stray} answer no call; dropped")
    missing = [c.id for c in calls if c.id not in results]
    if missing:
        problems.append(f"message {index}: calls {missing} had no results")
    if not stray and not missing and len(results) == len(message.tool_results):
        return message  # each call answered once, in whatever order: a provider takes it
    answers = [results.get(c.id) or ToolResult(c.id, c.name, ORPHANED, True) for c in calls]
    others = [p for p in message.parts if not isinstance(p, ToolResult)]
    parts = (*answers, *others)
    if parts == message.parts:
        return message
    if not parts:
        return None
    return Message("user", parts, id=message.id, steered=message.steered)


def _unknown(calls: list[ToolCall], id: str) -> Message:
    return Message("user", tuple(ToolResult(c.id, c.name, ORPHANED, True) for c in calls), id=id)


def _free_id(wanted: str, taken: set[str]) -> str:
    """``wanted``, or it with a number after, whichever no message of the transcript has."""
    id, n = wanted, 1
    while id in taken:
        n += 1
        id = f"{wanted}.{n}"
    taken.add(id)
    return id
