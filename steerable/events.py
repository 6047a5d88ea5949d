"""What a run reports as it goes. The CLI, the service and the web console render these.

A run sends each event to the optional sink given to ``Runner.run``/``Runner.start`` and to
every ``async for`` over ``Run.events()``. The last event of every run is :class:`Ended`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from steerable.messages import Message, ToolCall, ToolResult
from steerable.models.base import Usage

if TYPE_CHECKING:
    from steerable.runner import Result


@dataclass(frozen=True, slots=True)
class ModelRequested:
    """The run sent its ``step``-th model request (1-based) over ``messages`` messages."""

    step: int
    messages: int


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of the reply's text as the model streams it."""

    text: str


@dataclass(frozen=True, slots=True)
class Replied:
    """The model's whole reply."""

    message: Message
    usage: Usage


@dataclass(frozen=True, slots=True)
class ToolStarted:
    """A tool call began."""

    call: ToolCall


@dataclass(frozen=True, slots=True)
class ToolEnded:
    """A tool call has its result (an error result if it failed)."""

    call: ToolCall
    result: ToolResult


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


Event = ModelRequested | TextDelta | Replied | ToolStarted | ToolEnded | SteersTaken | Saved | Ended
EventSink = Callable[[Event], object]
