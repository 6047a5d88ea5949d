"""The bodies and answers of the HTTP API, as pydantic models (they make the OpenAPI schema)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from steerable.messages import Message, Native, Part, Reasoning, Text, ToolCall, ToolResult
from steerable.service._service import MAX_ID, MAX_TEXT
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
    "InputOut",
    "MessageOut",
    "SendBody",
    "Sent",
    "SessionOut",
    "SessionsPage",
    "StatusOut",
    "SteerBody",
    "Steered",
    "StopBody",
    "Stopped",
    "TranscriptPage",
    "TurnOut",
    "event_out",
    "input_out",
    "message_out",
    "session_out",
    "turn_out",
]

NO_NUL = r"^[^\x00]+$"
"""The pattern of an id in the schema: no NUL (the stores cannot all hold it)."""
TEXT = r"^[^\x00]*[^\x00\s][^\x00]*$"
"""The pattern of an input's text in the schema: no NUL, and not only whitespace (``\\s`` as
Python's ``re`` reads it: what ``str.strip`` removes, which is what the service checks)."""

_BODY = ConfigDict(extra="forbid")  # an unknown field is refused, never dropped unread


class SendBody(BaseModel):
    """A message to send (or a steer): its text, and its id if the client names it."""

    model_config = _BODY
    text: Annotated[
        str,
        Field(
            min_length=1,
            description="at most 1,000,000 bytes of UTF-8; no NUL; not only whitespace",
            json_schema_extra={"pattern": TEXT},
        ),
    ]
    id: (
        Annotated[
            str, Field(min_length=1, max_length=MAX_ID, json_schema_extra={"pattern": NO_NUL})
        ]
        | None
    ) = None

    @field_validator("text")
    @classmethod
    def _text(cls, text: str) -> str:
        # the service's own rules, checked here so the answer names the field and the rule
        if "\x00" in text:
            raise PydanticCustomError("nul", "holds NUL, which no input may")
        if not text.strip():
            raise PydanticCustomError("blank", "is only whitespace")
        if len(text.encode("utf-8")) > MAX_TEXT:
            raise PydanticCustomError("too_long", f"is over {MAX_TEXT:,} bytes of UTF-8")
        return text

    @field_validator("id")
    @classmethod
    def _id(cls, id: str | None) -> str | None:
        if id is not None and "\x00" in id:
            raise PydanticCustomError("nul", "holds NUL, which no id may")
        return id


class SteerBody(SendBody):
    """A steer: offered to the running turn's next step."""


class StopBody(BaseModel):
    """Stop takes no fields."""

    model_config = _BODY


class Sent(BaseModel):
    """A send accepted: ``turn`` is the input's own id (a turn is named by its prompt)."""

    id: str
    turn: str
    state: Literal["started", "queued"]


class Steered(BaseModel):
    """A steer accepted: the running turn it was offered to, or null (a turn of its own)."""

    id: str
    turn: str | None


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


class InputOut(BaseModel):
    """An input and its fate: ``waiting``, ``taken`` (by ``turn`` at ``step``), ``turn`` (it
    is the prompt of ``turn``)."""

    id: str
    kind: Literal["send", "steer"]
    text: str
    seq: int
    state: Literal["waiting", "taken", "turn"]
    turn: str | None
    step: int | None


class StatusOut(BaseModel):
    """A session now."""

    session: str
    turn: TurnOut | None
    waiting: list[InputOut]
    queued: int


class SessionOut(BaseModel):
    """A session in a listing."""

    session: str
    state: Literal["idle", "running", "queued"]
    turn: str | None
    queued: int
    updated_at: float


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
    )


def status_out(sid: str, status: Status) -> StatusOut:
    """The answer for a session's status, under its public id."""
    return StatusOut(
        session=sid,
        turn=None if status.turn is None else turn_out(status.turn),
        waiting=[input_out(v) for v in status.waiting],
        queued=status.queued,
    )


def session_out(summary: SessionSummary, prefix: str) -> SessionOut:
    """A listed session under its public id."""
    return SessionOut(
        session=summary.session[len(prefix) :],
        state=summary.state,
        turn=summary.turn,
        queued=summary.queued,
        updated_at=summary.updated_at,
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
    )


def event_out(event: ServiceEvent) -> EventOut:
    """A durable event."""
    return EventOut(id=event.id, kind=event.kind, turn=event.turn, data=event.data, at=event.at)
