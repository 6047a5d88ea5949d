"""The loop's public face: :class:`Spec`, :class:`Runner`, :class:`Run` and :class:`Result`.

``Runner.run(spec, messages, model)`` runs the spec's pattern over ``messages`` and returns
a :class:`Result`; ``Runner.start(...)`` returns a :class:`Run` handle to steer, stop,
watch (``async for event in run.events()``) and await. The pattern itself (ReAct) lives in
:mod:`steerable.loop`.

There is no resume call. To carry on a conversation, load its transcript and pass it: if it
ends with a tool result or a steer (a run died mid-turn), pass it as it is and the step is
redone; if it ends with the assistant's answer, append the new user message first. A
transcript that ends with an assistant message is sent as it is, and a provider that does
not accept assistant prefill will say so: steerable does not guard what some providers
allow.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from steerable.errors import UsageError
from steerable.events import Event, EventSink
from steerable.messages import Message, user
from steerable.models.base import Model, ModelSettings, ToolSpec, Usage
from steerable.session import Session
from steerable.store import Steer
from steerable.tools import Tool, ToolFunction, as_tools

EndReason = Literal["completed", "max_steps", "stopped", "failed"]


@dataclass(frozen=True, slots=True)
class Spec:
    """What to run: the pattern, its limits, tools, instructions and (optionally) a session.

    ``session=None`` (the default) makes no store call at all. With a session the
    transcript is saved before every model request and once more when the pattern
    returns, and the session's steers are taken at every step. ``steers_per_turn`` caps
    the steers one run takes (its own and the session's together); the rest wait.
    ``tool_timeout`` applies to tools that set no timeout of their own.
    """

    pattern: Literal["react"] = "react"
    max_steps: int = 32
    tools: Sequence[Tool | ToolFunction] = ()
    instructions: str | None = None
    settings: ModelSettings = ModelSettings()
    session: Session | None = None
    steers_per_turn: int = 16
    tool_timeout: float | None = None
    tool_specs: tuple[ToolSpec, ...] = field(init=False, repr=False, default=())

    def __post_init__(self) -> None:
        if self.pattern != "react":
            raise UsageError(f"unknown pattern {self.pattern!r}; the patterns are: 'react'")
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
    ``unapplied_steers`` the steers given to ``Run.steer`` that no model request saw (with
    a session they are also left in its store, for the next run to take); ``error`` what
    failed the run when ``reason`` is ``"failed"``.
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


class Run:
    """A running loop: steer it, stop it, watch its events, await its :class:`Result`.

    Create one with :meth:`Runner.start`.
    """

    def __init__(
        self,
        spec: Spec,
        messages: Sequence[Message],
        model: Model,
        events: EventSink | None,
    ) -> None:
        from steerable.loop import ReAct  # the pattern imports this module's types

        self._box: list[Steer] = []
        self._stopping = False
        self._subscribers: list[asyncio.Queue[Event]] = []
        self._loop = ReAct(self, spec, messages, model, events)
        self._task = asyncio.get_running_loop().create_task(self._loop.main())

    def steer(self, text: str | Steer, *, id: str | None = None) -> Steer:
        """Leave a message for the run's next step. No I/O: it waits in the run's memory.

        A steer whose id this run has seen is ignored (and returned as it was first given).
        """
        if self._task.done():
            raise UsageError("the run has ended; steer its session, or start a new run")
        steer = text if isinstance(text, Steer) else Steer(text, id) if id else Steer(text)
        for waiting in self._box:
            if waiting.id == steer.id:
                return waiting
        self._box.append(steer)
        return steer

    def stop(self) -> None:
        """End the run now: a model request or tool call under way is cancelled.

        Calls cut short get an error result saying so, the transcript is saved (with a
        session) and the result's reason is ``"stopped"``. Stopping an ended run does
        nothing.
        """
        self._stopping = True
        self._loop.interrupt()

    @property
    def stopping(self) -> bool:
        """Whether :meth:`stop` was called."""
        return self._stopping

    def take_box(self, limit: int | None = None) -> list[Steer]:
        """Remove and return up to ``limit`` (default: all) steers from the run's box."""
        if not self._box:
            return []
        taken, self._box[:] = self._box[:limit], self._box[limit:]
        return taken

    def publish(self, event: Event) -> None:
        """Hand ``event`` to every ``events()`` iterator."""
        for queue in self._subscribers:
            queue.put_nowait(event)

    @property
    def listened(self) -> bool:
        """Whether anything iterates over this run's events."""
        return bool(self._subscribers)

    async def events(self) -> AsyncIterator[Event]:
        """The run's events from now on, ending with :class:`steerable.events.Ended`."""
        from steerable.events import Ended

        if self._task.done():
            yield Ended(self._task.result())
            return
        queue: asyncio.Queue[Event] = asyncio.Queue()
        self._subscribers.append(queue)
        try:
            while True:
                event = await queue.get()
                yield event
                if isinstance(event, Ended):
                    return
        finally:
            self._subscribers.remove(queue)

    def done(self) -> bool:
        """Whether the run has ended."""
        return self._task.done()

    def __await__(self) -> Generator[Any, None, Result]:
        return self._task.__await__()


def _messages(messages: object) -> list[Message]:
    if isinstance(messages, str):
        return [user(messages)]
    if not isinstance(messages, Sequence):
        raise UsageError(f"messages is a str or a sequence of Message, not {type(messages)}")
    for message in messages:
        if not isinstance(message, Message):
            raise UsageError(f"messages holds Message objects, not {type(message).__name__}")
    return list(messages)


class Runner:
    """Runs a :class:`Spec` over messages with a model."""

    @staticmethod
    def start(
        spec: Spec,
        messages: str | Sequence[Message],
        model: Model,
        events: EventSink | None = None,
    ) -> Run:
        """Start a run in the background and return its handle. Needs a running event loop."""
        if not isinstance(spec, Spec):
            raise UsageError(f"spec is a steerable.Spec, not {type(spec).__name__}")
        if not callable(getattr(model, "stream", None)):
            raise UsageError(f"model has no stream(request) method: {model!r}")
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            raise UsageError("Runner.start needs a running event loop (use asyncio.run)") from None
        return Run(spec, _messages(messages), model, events)

    @staticmethod
    async def run(
        spec: Spec,
        messages: str | Sequence[Message],
        model: Model,
        events: EventSink | None = None,
    ) -> Result:
        """Run to the end and return the :class:`Result`."""
        return await Runner.start(spec, messages, model, events)
