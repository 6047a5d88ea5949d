"""Pydantic AI's ``ConversationStore`` over a steerable store.

A conversation is the steerable session of its id; its log is the session's transcript, each
message the model message it stores (:func:`~steerable.integrations.pydantic_ai.history`).
What a steerable store keeps is all it answers with, so:

- an entry's id is its place, ``POSITION@SESSION``, and the revision is the transcript's
  length and last message id, set on the record as it is written (a save that adds nothing
  leaves it as it was);
- ``usage`` is summed from the stored responses (requests and tokens; ``tool_calls`` counts
  the returns of the calls that ran and succeeded, as Pydantic AI counts them);
- what a transcript cannot hold is refused with a :class:`~steerable.UsageError`, never
  dropped: a rewritten history (a branch, compaction), a fork, a scope, the deferred tool
  requests of a paused run, listing conversations;
- ``delete`` forgets the session whole (transcript, waiting steers, service records), through
  the store's :class:`~steerable.store.Rewritable` verbs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic_ai._conversation_marks import mark_stored
from pydantic_ai.agent import AgentRunResult
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationEntry,
    ConversationRecord,
    ConversationStore,
)
from pydantic_ai.messages import ModelResponse, ToolReturnPart
from pydantic_ai.usage import RunUsage

from steerable.errors import StoreError, TranscriptConflict, UsageError
from steerable.integrations.pydantic_ai._records import model_message, record, revision
from steerable.integrations.pydantic_ai._steering import stored_runs
from steerable.messages import Message
from steerable.store import CheckedStore, Store, rewritable


class UnknownEntry(StoreError, KeyError):
    """No such entry in the store: a place past a transcript's end, or not an entry id.

    A :class:`~steerable.StoreError`, and a ``KeyError`` as Pydantic AI's own in-memory
    store raises for an unknown entry, so code written for either catches it.
    """

    def __str__(self) -> str:  # KeyError's own quotes its argument like a repr
        return str(self.args[0]) if self.args else ""


class SteerableConversationStore(ConversationStore):
    """Conversations kept in the steerable store ``store``; see the module docstring."""

    def __init__(self, store: Store) -> None:
        self.store = CheckedStore(store)

    def __repr__(self) -> str:
        return f"SteerableConversationStore({self.store.inner!r})"

    async def save(
        self, conversation: Conversation | AgentRunResult[Any], *, scope: str | None = None
    ) -> list[ConversationEntry]:
        """Append what the store does not have; returns the stored entries, under their ids.

        A run that :class:`Steering` stored as it went (its ``conversation`` loaded here, or
        given none) finds the store holding it already: the save adds nothing, returns no
        entries and moves the conversation (or the result) on to the stored revision.
        """
        try:
            entries = await super().save(conversation, scope=scope)
        except ConversationConflict:
            if await self._stored_by_steering(conversation, scope):
                return []
            raise
        if not entries:
            return entries
        conversation_id = (
            conversation.conversation.conversation_id
            if isinstance(conversation, AgentRunResult)
            else conversation.conversation_id
        )
        end = int(_revision_length(conversation, conversation_id))
        start = end - len(entries)
        return [
            ConversationEntry(
                id=_entry(conversation_id, start + n),
                parent_id=_entry(conversation_id, start + n - 1) if start + n else None,
                message=e.message,
            )
            for n, e in enumerate(entries)
        ]

    async def _stored_by_steering(
        self, conversation: Conversation | AgentRunResult[Any], scope: str | None
    ) -> bool:
        """Whether ``conversation`` is the run a :class:`Steering` of this process stored, and
        the store still ends with it; if so, it carries the stored revision on."""
        found = (
            conversation.conversation if isinstance(conversation, AgentRunResult) else conversation
        )
        run_id = found.messages[-1].run_id if found.messages else None
        cid = found.conversation_id
        if scope is not None or run_id is None or stored_runs.get(run_id, ("", ""))[0] != cid:
            return False
        now = revision(await self.store.messages(cid))
        if stored_runs[run_id][1] != now:
            return False  # stored since: a conflict like any other
        if isinstance(conversation, AgentRunResult):
            # what Pydantic AI's own stores tell a saved result, so that its `conversation`
            # continues from the new revision
            conversation._conversation_saved(now)  # pyright: ignore[reportPrivateUsage]
        else:
            conversation.revision = now
            mark_stored(conversation, conversation.messages)
        return True

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        """The record of the session ``conversation_id``, or None while it is empty."""
        messages = await self.store.messages(conversation_id)
        return _record(conversation_id, messages) if messages else None

    async def read_records(
        self, *, scope: str | None = None, limit: int | None = None
    ) -> Sequence[ConversationRecord]:
        """Refused: a steerable store does not list its sessions."""
        raise UsageError("a steerable store cannot list conversations: keep their ids yourself")

    async def write_record(
        self,
        record: ConversationRecord,
        *,
        new_entries: Sequence[ConversationEntry] = (),
        expected_revision: str | None,
    ) -> None:
        """Append ``new_entries`` to the transcript, checked against ``expected_revision``."""
        _refuse_what_a_transcript_cannot_hold(record)
        cid = record.conversation_id
        stored = await self.store.messages(cid)
        if (revision(stored) if stored else None) != expected_revision:
            raise ConversationConflict(cid)
        head = _entry(cid, len(stored) - 1) if stored else None
        parent = new_entries[0].parent_id if new_entries else record.head_id
        if parent != head:
            raise UsageError(
                f"conversation {cid!r}: a steerable transcript only grows; a rewritten "
                "history (a branch, compaction) or a fork cannot be stored"
            )
        new = [record_of(e.message) for e in new_entries]
        try:
            await self.store.save(cid, new, at=len(stored))
        except TranscriptConflict:
            raise ConversationConflict(cid) from None
        # Pydantic AI reads the record's revision back after this call: make it the one the
        # store will answer with.
        record.revision = revision([*stored, *new])
        record.head_id = _entry(cid, len(stored) + len(new) - 1) if stored or new else None

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        """Forget the session ``conversation_id``: its transcript, its waiting steers and its
        service records, if it is still at ``expected_revision`` (the store must be
        :class:`~steerable.store.Rewritable`, as every store of steerable is)."""
        store = rewritable(self.store)
        stored = await self.store.messages(conversation_id)
        if not stored or revision(stored) != expected_revision:
            raise ConversationConflict(conversation_id)
        try:  # the check and the cut are one: a message stored since is a conflict
            await store.truncate(conversation_id, at=0, length=len(stored))
        except TranscriptConflict:
            raise ConversationConflict(conversation_id) from None
        await store.delete(conversation_id)

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        """The entry ``POSITION@SESSION``."""
        position, session = _parse(entry_id)
        entries = await self.read_history(entry_id, limit=1)
        if not entries:
            raise UnknownEntry(f"no entry {position} in conversation {session!r}")
        return entries[0]

    async def read_history(
        self, head_id: str | None, *, limit: int | None = None
    ) -> list[ConversationEntry]:
        """The entries up to ``head_id`` (the last ``limit`` of them), from one read."""
        if head_id is None:
            return []
        position, session = _parse(head_id)
        messages = await self.store.messages(session)
        if position >= len(messages):
            raise UnknownEntry(f"no entry {position} in conversation {session!r}")
        first = 0 if limit is None else max(0, position + 1 - limit)
        return [
            ConversationEntry(
                id=_entry(session, n),
                parent_id=_entry(session, n - 1) if n else None,
                message=model_message(messages[n]),
            )
            for n in range(first, position + 1)
        ]


record_of = record


def _refuse_what_a_transcript_cannot_hold(record: ConversationRecord) -> None:
    cid = record.conversation_id
    for what, value in (
        ("a scope", record.scope),
        ("deferred tool requests (a paused run)", record.deferred_tool_requests),
        ("a fork", record.forked_from),
        ("branches", record.branches or None),
    ):
        if value is not None:
            raise UsageError(f"conversation {cid!r}: a steerable transcript cannot hold {what}")


def _record(cid: str, messages: list[Message]) -> ConversationRecord:
    history = [model_message(m) for m in messages]
    usage = RunUsage()
    for message in history:
        if isinstance(message, ModelResponse):
            usage.incr(message.usage)
            usage.requests += 1
        else:
            usage.tool_calls += sum(_a_tool_ran(p) for p in message.parts)
    stamps = [m.timestamp for m in history if m.timestamp is not None]
    found = ConversationRecord(
        conversation_id=cid,
        head_id=_entry(cid, len(messages) - 1),
        usage=usage,
        revision=revision(messages),
    )
    if stamps:  # when the newest stored message was made; there is no other time to tell
        found.updated_at = max(stamps)
    return found


# What Pydantic AI 2.68 writes in the returns of output tools (`_tool_execution.py`), which
# count no tool call; it counts a call only once it succeeded (`record_tool_call`).
_OUTPUT_STATUSES = frozenset(
    {
        "Final result processed.",
        "Output tool not used - a final result was already processed.",
        "Output tool not used - output function execution failed.",
        "Output tool not used - output failed validation.",
        "Tool not executed - a final result was already processed.",
    }
)


def _a_tool_ran(part: object) -> bool:
    """Whether ``part`` is the return of a tool call that ran and succeeded, as Pydantic AI
    counts ``usage.tool_calls``: not a retried, failed, denied or interrupted call, not an
    output tool's status."""
    return (
        isinstance(part, ToolReturnPart)
        and part.outcome == "success"
        and not (isinstance(part.content, str) and part.content in _OUTPUT_STATUSES)
    )


def _revision_length(conversation: Conversation | AgentRunResult[Any], cid: str) -> str:
    found = conversation.conversation if isinstance(conversation, AgentRunResult) else conversation
    revision = found.revision or "0:"
    return revision.split(":", 1)[0]


def _entry(session: str, position: int) -> str:
    return f"{position}@{session}"


def _parse(entry_id: str) -> tuple[int, str]:
    position, at, session = entry_id.partition("@")
    if not at or not position.isdigit() or not session:
        raise UnknownEntry(f"not an entry of a steerable transcript: {entry_id!r}")
    return int(position), session
