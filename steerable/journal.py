"""The tool journal: a call of a tool with side effects runs once, across crashes and replicas.

A tool marked ``side_effects=True`` (``@tool(side_effects=True)``) is *journaled* when the run
has a session. Before such a call runs, the reply that made it is stored (so a resumed run
carries on the same calls rather than asking the model again) and the call is marked started
in the session's journal, under its idempotency key; as it ends, its result is recorded. A
run that finds a reply whose calls have no results (its process died mid-step) carries those
calls on, and for each journaled one:

- a call whose result was recorded is not run: the recorded result is used;
- a call marked started and never ended is run again only if the tool is also marked
  ``idempotent=True``; otherwise the model gets an error result saying the call was
  interrupted and its outcome is unknown (:data:`UNKNOWN`), so the model, or a person,
  checks rather than doing it twice;
- a call never marked started (the process died before it began) runs.

Marking a call started is atomic in the store (:class:`steerable.store.Journaling`): of two
replicas carrying one turn on at once, one is told the call is new and runs it. That holds
without the lease's fencing, so journal writes are not fenced: a result a stale holder
records is still what the tool did.

Each call's key (:func:`call_key`) is a digest of the session, the reply's message id and the
call's id: the same on every retry of that call, different in every other session (a fork
too), 32 hex characters, fit for a payment API's ``Idempotency-Key`` header. A tool gets it
through a :class:`ToolContext` parameter.

A run with no journaled tool makes no journal writes: a step stays one store call.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from steerable import codec
from steerable.errors import CorruptRecord
from steerable.messages import Message, ToolCall, ToolResult

__all__ = ["UNKNOWN", "ToolContext", "call_key", "decode_result", "encode_result"]

UNKNOWN = (
    "this call was interrupted (its process stopped while it ran) and its outcome is"
    " unknown: it may or may not have taken effect. It was not run again, because the tool"
    " is not marked idempotent. Check its effect before you call it again."
)
"""The error result of a journaled call that started, never ended, and may not be re-run."""


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool learns of the call it serves: declare a parameter of this type.

    ``key`` is the call's idempotency key (the same on every retry of this call, unique
    across sessions): pass it on to the outside world. ``retried`` is True when the call
    had started before and is run again (only a tool marked idempotent is).
    """

    call: ToolCall
    key: str
    session: str | None = None
    retried: bool = False


def call_key(session: str | None, message: str, call: str) -> str:
    """The idempotency key of call ``call`` of the reply ``message`` in ``session``."""
    digest = hashlib.sha256()
    for part in (session or "", message, call):
        digest.update(part.encode("utf-8", "surrogatepass"))
        digest.update(b"\x00")
    return digest.hexdigest()[:32]


def encode_result(key: str, result: ToolResult) -> str:
    """The stored text of a recorded result (the codec's, of a message holding it)."""
    return codec.encode(Message("user", (result,), id=key))


def decode_result(key: str, text: str | bytes) -> ToolResult:
    """The result stored as ``text``; :class:`CorruptRecord` if it is not one."""
    results = codec.decode(key, text, where=f"journal key {key!r}").tool_results
    if len(results) != 1:
        raise CorruptRecord(f"journal entry {key!r} does not hold one tool result")
    return results[0]
