"""The bodies and answers of the HTTP API, as pydantic models (they make the OpenAPI schema)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from steerable.messages import Message, Native, Part, Reasoning, Text, ToolCall, ToolResult
from steerable.service_store import (
    Entry,
    InputView,
    ServiceEvent,
    SessionSummary,
    Status,
    TurnView,
)

__all__ = [
    "EventOut",
    "FateOut",
    "Forked",
    "InputOut",
    "InputsPage",
    "MessageOut",
    "MetadataOut",
    "Sent",
    "SessionOut",
    "SessionsPage",
    "StatusOut",
    "Steered",
    "Stopped",
    "TranscriptPage",
    "TurnOut",
    "TurnsPage",
    "event_out",
    "fate_out",
    "input_out",
    "message_out",
    "session_out",
    "turn_out",
]

from steerable.service.http._bodies import NO_NUL, TEXT

__all__ += ["NO_NUL", "TEXT"]


class Sent(BaseModel):
    """A send accepted: ``turn`` is the input's own id (a turn is named by its prompt);
    ``ahead`` the turns before it."""

    id: str
    turn: str
    state: Literal["started", "queued"]
    ahead: int


class FateOut(BaseModel):
    """Where a steer went: ``taken`` by ``turn`` at ``step``; ``turn``: it is a turn of its
    own (``turn`` is its id; queued or started); ``cancelled``; ``pending``: still offered to
    ``turn``, which has not reached its next step (the wait ran out first)."""

    state: Literal["taken", "turn", "cancelled", "pending"]
    turn: str | None
    step: int | None


class Steered(BaseModel):
    """A steer accepted: the started turn it was offered to (its next step takes it, unless
    the turn ends first), or null (a turn of its own); ``fate`` when the request waited."""

    id: str
    turn: str | None
    fate: FateOut | None = None


class Stopped(BaseModel):
    """The turn asked to stop, or null when none ran."""

    turn: str | None


class TurnOut(BaseModel):
    """A turn: its state and lease; ``output`` (its answer) on ``GET .../turns/{tid}``."""

    id: str
    state: Literal["queued", "running", "completed", "stopped", "failed", "max_steps"]
    holder: str | None
    epoch: int | None
    lease_expires_at: float | None
    steps: int
    steers_taken: int
    stop_requested: bool
    start: int | None = None
    end: int | None = None
    error: str | None = None
    output: str | None = None
    seq: int
    started_at: float | None
    ended_at: float | None
    usage: dict[str, int]


class TurnsPage(BaseModel):
    """A page of a session's turns, in order; ``next`` is the ``after`` of the next page."""

    turns: list[TurnOut]
    next: int | None


class InputOut(BaseModel):
    """An input and its fate: ``waiting`` (offered to ``turn``, or to be a turn of its own),
    ``taken`` (by ``turn`` at ``step``), ``turn`` (it is the prompt of ``turn``),
    ``cancelled``; ``at`` its arrival (seconds since the Unix epoch)."""

    id: str
    kind: Literal["send", "steer"]
    text: str
    seq: int
    state: Literal["waiting", "taken", "turn", "cancelled"]
    turn: str | None
    step: int | None
    at: float
    metadata: dict[str, Any]


class InputsPage(BaseModel):
    """A page of a session's inputs by ``seq``; ``next`` is the ``after`` of the next page."""

    inputs: list[InputOut]
    next: int | None


class StatusOut(BaseModel):
    """A session now: its running turn, the first inputs waiting (``waiting_next``: page
    the rest with ``GET .../inputs?state=waiting&after=``), the counts, its metadata."""

    session: str
    turn: TurnOut | None
    waiting: list[InputOut]
    waiting_total: int
    waiting_next: int | None
    queued: int
    metadata: dict[str, Any]


class SessionOut(BaseModel):
    """A session in a listing."""

    session: str
    state: Literal["idle", "running", "queued"]
    turn: str | None
    queued: int
    updated_at: float
    metadata: dict[str, Any]


class Forked(BaseModel):
    """A fork made: the new session, how many messages it holds, and the send's answer."""

    session: str
    messages: int
    sent: Sent | None


class MetadataOut(BaseModel):
    """A session's metadata."""

    metadata: dict[str, Any]


class SessionsPage(BaseModel):
    """A page of the tenant's sessions; ``next`` is the ``after`` of the next page."""

    sessions: list[SessionOut]
    next: str | None


class TextPart(BaseModel):
    """Text."""

    type: Literal["text"] = "text"
    text: str


class ToolCallPart(BaseModel):
    """A tool call; ``arguments`` is the model's JSON text, as it wrote it."""

    type: Literal["tool_call"] = "tool_call"
    id: str
    name: str
    arguments: str


class ToolResultPart(BaseModel):
    """A tool's result."""

    type: Literal["tool_result"] = "tool_result"
    call_id: str
    name: str
    content: str
    is_error: bool


class ReasoningPart(BaseModel):
    """The model's reasoning (its text; the provider's own block is not shown)."""

    type: Literal["reasoning"] = "reasoning"
    text: str


class NativePart(BaseModel):
    """A message as an agent framework records it: which framework, and its text.

    The framework's own record is kept verbatim in the store; the API shows what a person
    reads of it.
    """

    type: Literal["native"] = "native"
    framework: str
    text: str


PartOut = Annotated[
    TextPart | ToolCallPart | ToolResultPart | ReasoningPart | NativePart,
    Field(discriminator="type"),
]


class MessageOut(BaseModel):
    """A transcript message at ``position``, with the turn it belongs to."""

    position: int
    id: str
    turn: str | None
    steered: bool
    role: Literal["user", "assistant"]
    parts: list[PartOut]
    at: float | None


class TranscriptPage(BaseModel):
    """A page of the transcript; ``next`` is the ``after`` of the next page."""

    messages: list[MessageOut]
    next: int | None


class EventOut(BaseModel):
    """A durable event, as the ``data`` of an SSE event."""

    id: int
    kind: str
    turn: str | None
    data: dict[str, object]
    at: float


def turn_out(view: TurnView, *, output: bool = False) -> TurnOut:
    """The answer for a turn."""
    return TurnOut(
        id=view.id,
        state=view.state,
        holder=view.holder,
        epoch=view.epoch,
        lease_expires_at=view.lease_expires_at,
        steps=view.steps,
        steers_taken=view.steers_taken,
        stop_requested=view.stop_requested,
        start=view.start,
        end=view.end,
        error=view.error,
        output=view.text if output else None,
        seq=view.seq,
        started_at=view.started_at,
        ended_at=view.ended_at,
        usage=view.usage,
    )


def input_out(view: InputView) -> InputOut:
    """The answer for an input (the library's ``prompt`` is the API's ``turn``)."""
    return InputOut(
        id=view.id,
        kind=view.kind,
        text=view.text,
        seq=view.seq,
        state="turn" if view.state == "prompt" else view.state,
        turn=view.turn,
        step=view.step,
        at=view.at,
        metadata=view.metadata,
    )


def fate_out(view: InputView) -> FateOut:
    """Where an input went, as far as is known."""
    if view.state == "taken":
        return FateOut(state="taken", turn=view.turn, step=view.step)
    if view.state == "cancelled":
        return FateOut(state="cancelled", turn=None, step=None)
    if view.state == "waiting" and view.turn is not None:
        return FateOut(state="pending", turn=view.turn, step=None)
    return FateOut(state="turn", turn=view.id, step=None)


def status_out(sid: str, status: Status, waiting: list[InputOut]) -> StatusOut:
    """The answer for a session's status, under its public id, with the ``waiting`` kept."""
    more = len(waiting) < status.waiting_total
    return StatusOut(
        session=sid,
        turn=None if status.turn is None else turn_out(status.turn),
        waiting=waiting,
        waiting_total=status.waiting_total,
        waiting_next=(waiting[-1].seq if waiting else 0) if more else None,
        queued=status.queued,
        metadata=status.metadata,
    )


def session_out(summary: SessionSummary, prefix: str) -> SessionOut:
    """A listed session under its public id."""
    return SessionOut(
        session=summary.session[len(prefix) :],
        state=summary.state,
        turn=summary.turn,
        queued=summary.queued,
        updated_at=summary.updated_at,
        metadata=summary.metadata,
    )


def _part(part: Part) -> TextPart | ToolCallPart | ToolResultPart | ReasoningPart | NativePart:
    if isinstance(part, Text):
        return TextPart(text=part.text)
    if isinstance(part, ToolCall):
        return ToolCallPart(id=part.id, name=part.name, arguments=part.arguments)
    if isinstance(part, ToolResult):
        return ToolResultPart(
            call_id=part.call_id, name=part.name, content=part.content, is_error=part.is_error
        )
    if isinstance(part, Native):
        return NativePart(framework=part.framework, text=part.text)
    assert isinstance(part, Reasoning)
    return ReasoningPart(text=part.text)


def message_out(entry: Entry) -> MessageOut:
    """A transcript entry."""
    message: Message = entry.message
    return MessageOut(
        position=entry.position,
        id=message.id,
        turn=entry.turn,
        steered=message.steered,
        role=message.role,
        parts=[_part(p) for p in message.parts],
        at=entry.at,
    )


def event_out(event: ServiceEvent) -> EventOut:
    """A durable event."""
    return EventOut(id=event.id, kind=event.kind, turn=event.turn, data=event.data, at=event.at)
