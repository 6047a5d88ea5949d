"""The loop's public face: :class:`Runner` and the :class:`Run` handle.

``Runner.run(spec, messages, model)`` runs the spec's pattern over ``messages`` and returns
a :class:`Result`; ``Runner.start(...)`` returns a :class:`Run` handle to steer, stop,
watch (``async for event in run.events()``) and await. :class:`Spec` and :class:`Result`
live in :mod:`steerable.spec` (importable from here too); the pattern itself (ReAct) lives
in :mod:`steerable.loop`, below this module, and is driven through a private control
object, never through the ``Run``.

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
from typing import Any

from steerable import telemetry
from steerable._control import Control
from steerable.errors import UsageError
from steerable.events import Ended, Event, EventSink
from steerable.loop import PATTERNS
from steerable.messages import Message, user
from steerable.models.base import Model
from steerable.spec import EndReason, Result, Spec
from steerable.store import Steer, as_steer

__all__ = ["EndReason", "Result", "Run", "Runner", "Spec"]


class Run:
    """A running loop: steer it, stop it, watch its events, await its :class:`Result`.

    Create one with :meth:`Runner.start`.
    """

    __slots__ = ("_control", "_pattern", "_session", "_task")

    def __init__(
        self,
        spec: Spec,
        messages: Sequence[Message],
        model: Model,
        events: EventSink | None,
    ) -> None:
        self._control = Control()
        self._session = spec.session.id if spec.session is not None else ""
        self._pattern = PATTERNS[spec.pattern](self._control, spec, messages, model, events)
        self._task = asyncio.get_running_loop().create_task(self._pattern.main())
        self._task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[Result]) -> None:
        # A run whose task was cancelled (even before it began) did not get to publish its
        # end: do it here, so no events() iterator waits forever.
        if self._control.ended is None:
            error = asyncio.CancelledError() if task.cancelled() else task.exception()
            self._control.end(self._pattern.abandoned(error or asyncio.CancelledError()))

    def steer(self, text: str | Steer, *, id: str | None = None) -> Steer:
        """Leave a message for the run's next step. No I/O: it waits in the run's memory.

        A steer whose id this run has seen (waiting, taken from its box or from the
        session's store) is ignored, and the one first seen is returned: a client that
        retries is safe. Steering a run that has ended is a :class:`UsageError`.
        """
        steer = as_steer(text, id)
        if telemetry.recording() and steer.id not in self._control.traces:
            with telemetry.input_span("steer", self._session, steer.id):
                self._control.traces[steer.id] = telemetry.carrier()
        return self._control.steer(steer)

    def stop(self) -> None:
        """End the run now: a model request or tool call under way is cancelled.

        Calls cut short get an error result saying so, the transcript is saved (with a
        session) and the result's reason is ``"stopped"``. A store write in flight is
        never cut. Stopping an ended run does nothing.
        """
        self._control.stop()

    async def events(self) -> AsyncIterator[Event]:
        """The run's events from now on, ending with :class:`steerable.events.Ended`."""
        control = self._control
        if control.ended is not None:
            yield Ended(control.ended)
            return
        queue: asyncio.Queue[Event] = asyncio.Queue()
        control.subs.append(queue)
        try:
            while True:
                event = await queue.get()
                yield event
                if isinstance(event, Ended):
                    return
        finally:
            control.subs.remove(queue)

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
