"""What a run reports as it goes. The CLI, the service and the web console render these.

A run sends each event to the optional sink given to ``Runner.run``/``Runner.start`` and to
every ``async for`` over ``Run.events()``. The last event every ``events()`` iterator gets
is :class:`Ended`, whatever ends the run (a cancelled run's too); the sink gets it unless
the run's task was cancelled (a cancelled run calls nothing more).

:class:`TextDelta` is the model's own event (:class:`steerable.models.base.TextDelta`),
passed on as the model streamed it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from steerable.messages import Message, ToolCall, ToolResult
from steerable.models.base import FinishReason, TextDelta, Usage
from steerable.spec import Result

__all__ = [
    "Ended",
    "Event",
    "EventSink",
    "ModelRequested",
    "Repaired",
    "Replied",
    "Saved",
    "SteersTaken",
    "TextDelta",
    "ToolEnded",
    "ToolStarted",
]


@dataclass(frozen=True, slots=True)
class ModelRequested:
    """The run sent its ``step``-th model request (1-based) over ``messages`` messages."""

    step: int
    messages: int


@dataclass(frozen=True, slots=True)
class Replied:
    """The model's whole reply; ``finish_reason`` says why it stopped, if the model said."""

    message: Message
    usage: Usage
    finish_reason: FinishReason | None = None


@dataclass(frozen=True, slots=True)
class ToolStarted:
    """A tool call began."""

    call: ToolCall


@dataclass(frozen=True, slots=True)
class ToolEnded:
    """A tool call has its result (an error result if it failed).

    ``replayed``: the result is the tool journal's, recorded by an earlier run; the tool
    did not run now.
    """

    call: ToolCall
    result: ToolResult
    replayed: bool = False


@dataclass(frozen=True, slots=True)
class Repaired:
    """The run found orphaned tool calls (or stray results) in what it was given and
    repaired the transcript from position ``at`` (:mod:`steerable.repair`); ``problems``
    says what was wrong. With a session the repair is stored."""

    at: int
    problems: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SteersTaken:
    """Steers joined the run at a step: from the run's own box or from the session's store."""

    messages: tuple[Message, ...]
    source: Literal["run", "session"]


@dataclass(frozen=True, slots=True)
class Saved:
    """The session's stored transcript now holds ``stored`` messages."""

    stored: int


@dataclass(frozen=True, slots=True)
class Ended:
    """The run ended; ``result`` says how."""

    result: Result


Event = (
    ModelRequested
    | TextDelta
    | Replied
    | ToolStarted
    | ToolEnded
    | SteersTaken
    | Saved
    | Repaired
    | Ended
)
EventSink = Callable[[Event], object]
