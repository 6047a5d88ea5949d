"""What a run is given (:class:`Spec`) and what it gives back (:class:`Result`).

These sit below the loop: the pattern reads a ``Spec`` and builds a ``Result``, and
nothing here imports the pattern, the run's handle or its events.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

from steerable.errors import UsageError
from steerable.messages import Message
from steerable.models.base import FinishReason, ModelSettings, ToolSpec, Usage
from steerable.session import Session
from steerable.store import Steer
from steerable.tools import Tool, ToolFunction, as_tools

PatternName = Literal["react"]
"""The patterns a run can follow; :mod:`steerable.loop` maps each name to its code."""

EndReason = Literal["completed", "max_steps", "stopped", "failed"]
"""Why a run ended: it answered, it reached ``max_steps``, it was stopped, or it failed
(a model, store or sink error, or the run's task was cancelled)."""

_PATTERNS: tuple[str, ...] = get_args(PatternName)


@dataclass(frozen=True, slots=True)
class Spec:
    """What to run: the pattern, its limits, tools, instructions and (optionally) a session.

    ``session=None`` (the default) makes no store call at all. With a session the
    transcript is saved before every model request and once more when the pattern
    returns, and the session's steers are taken at every step. ``steers_per_turn`` caps
    the steers one run takes (its own and the session's together); the rest wait.
    ``tool_timeout`` applies to tools that set no timeout of their own.
    """

    pattern: PatternName = "react"
    max_steps: int = 32
    tools: Sequence[Tool | ToolFunction] = ()
    instructions: str | None = None
    settings: ModelSettings = ModelSettings()
    session: Session | None = None
    steers_per_turn: int = 16
    tool_timeout: float | None = None
    tool_specs: tuple[ToolSpec, ...] = field(init=False, repr=False, default=())

    def __post_init__(self) -> None:
        if self.pattern not in _PATTERNS:
            known = ", ".join(repr(p) for p in _PATTERNS)
            raise UsageError(f"unknown pattern {self.pattern!r}; the patterns are: {known}")
        if not isinstance(self.max_steps, int) or self.max_steps < 1:
            raise UsageError(f"max_steps is an int >= 1, not {self.max_steps!r}")
        if not isinstance(self.steers_per_turn, int) or self.steers_per_turn < 0:
            raise UsageError(f"steers_per_turn is an int >= 0, not {self.steers_per_turn!r}")
        if self.session is not None and not isinstance(self.session, Session):
            raise UsageError(f"session is a steerable.Session, not {type(self.session).__name__}")
        tools = as_tools(self.tools)
        object.__setattr__(self, "tools", tools)
        object.__setattr__(self, "tool_specs", tuple(t.spec for t in tools))


@dataclass(frozen=True, slots=True)
class Result:
    """How a run ended.

    ``transcript`` is the whole conversation (what was passed in, then this run's
    messages); ``output`` the final answer's text (empty unless ``reason`` is
    ``"completed"``); ``steers`` the steered messages this run took, in order;
    ``unapplied_steers`` the steers given to ``Run.steer`` that no model request saw, or
    whose recording did not commit (with a session they are also left in its store, for
    the next run to take, when the store can be reached); ``error`` what failed the run
    when ``reason`` is ``"failed"`` (an ``asyncio.CancelledError`` for a cancelled run);
    ``finish_reason`` why the last reply stopped (``"length"``: cut by ``max_tokens``), or
    None when there was no reply or its model did not say.
    """

    transcript: tuple[Message, ...]
    output: str
    reason: EndReason
    steps: int
    usage: Usage
    steers: tuple[Message, ...]
    unapplied_steers: tuple[Steer, ...]
    new_messages: tuple[Message, ...]
    error: BaseException | None = None
    finish_reason: FinishReason | None = None
