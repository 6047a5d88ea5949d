"""What a run's public handle and its pattern share: the steer box, the stop, the listeners.

:class:`steerable.Run` puts steers and a stop in; the pattern takes steers at each step,
runs the work a stop may cut short through :meth:`Control.interruptible`, and publishes
events to the ``events()`` iterators. This module imports neither side: both sit above it.

A stop cancels the run's own task, and only while it is inside an interruptible phase (a
model request, tool calls): never a store write in flight. The phase tells the stop's
cancellation from one that came from outside (the task awaiting the run was cancelled) by
counting: the stop's request is withdrawn with ``Task.uncancel()``, and any left over is
the outside's, which propagates.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine, Iterable
from typing import Any, TypeVar

from steerable.errors import UsageError
from steerable.events import Ended, Event
from steerable.messages import Message
from steerable.spec import Result
from steerable.store import Steer

_T = TypeVar("_T")


class Stopped(Exception):
    """The run's stop cut an interruptible phase short (or came before it began)."""


class Control:
    """One run's steer box (with every steer id it has seen), stop flag and listeners."""

    __slots__ = (
        "_box",
        "_cancelled",
        "_closed",
        "_phase",
        "_seen",
        "ended",
        "stopping",
        "subs",
        "traces",
    )

    def __init__(self) -> None:
        self._box: list[Steer] = []
        self._seen: dict[str, Steer] = {}
        self._closed = False
        self._phase: asyncio.Task[Any] | None = None
        self._cancelled = False  # stop() cancelled the phase's task and that is not undone yet
        self.stopping = False
        self.subs: list[asyncio.Queue[Event]] = []
        self.ended: Result | None = None
        self.traces: dict[str, dict[str, str]] = {}  # steer id -> its span's context, if traced

    # -- steers -------------------------------------------------------------------------

    def steer(self, steer: Steer) -> Steer:
        """Put ``steer`` in the box, unless its id was seen (then the first one is returned)."""
        if self._closed:
            raise UsageError("the run has ended; steer its session, or start a new run")
        first = self._seen.setdefault(steer.id, steer)
        if first is steer:
            self._box.append(steer)
        return first

    def saw(self, messages: Iterable[Message]) -> None:
        """Remember the ids of steered messages the run holds (given, or taken from a store)."""
        for message in messages:
            if message.steered and message.id not in self._seen:
                self._seen[message.id] = Steer(message.text, message.id)

    def take(self, limit: int) -> list[Steer]:
        """Remove and return up to ``limit`` steers from the box, oldest first."""
        if not self._box:
            return []
        taken, self._box[:] = self._box[:limit], self._box[limit:]
        return taken

    def close(self) -> list[Steer]:
        """Refuse steers from now on; return those still waiting (the run is ending)."""
        self._closed = True
        left, self._box = self._box, []
        return left

    # -- the stop -----------------------------------------------------------------------

    def stop(self) -> None:
        """Set the stop flag; cancel the run's task if it is in an interruptible phase."""
        self.stopping = True
        if self._phase is not None and not self._cancelled:
            self._cancelled = True
            self._phase.cancel()

    async def interruptible(self, work: Coroutine[Any, Any, _T]) -> _T:
        """Await ``work`` in the current task; a stop raises :class:`Stopped` instead.

        The work finished before the stop's cancellation reached it: its value is kept,
        and the pattern sees the stop flag at its next check.
        """
        if self.stopping:
            work.close()
            raise Stopped
        task = asyncio.current_task()
        assert task is not None, "a run's pattern runs in a task"
        self._phase = task
        try:
            value = await work
        except asyncio.CancelledError:
            if self._withdraw(task):
                raise Stopped from None
            raise
        finally:
            self._phase = None
        if self._cancelled:
            # stop() was called from inside the work (a tool, the sink) as it returned: the
            # cancellation is still due at this task's next await; take it here.
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(0)
            if not self._withdraw(task):
                raise asyncio.CancelledError
        return value

    def _withdraw(self, task: asyncio.Task[Any]) -> bool:
        """Undo stop()'s cancellation; True if no other cancellation is pending."""
        if not self._cancelled:
            return False
        self._cancelled = False
        return task.uncancel() == 0

    # -- listeners ----------------------------------------------------------------------

    def publish(self, event: Event) -> None:
        """Hand ``event`` to every ``events()`` iterator."""
        for queue in self.subs:
            queue.put_nowait(event)

    def end(self, result: Result) -> None:
        """Publish :class:`Ended` (once): every iterator's last event."""
        if self.ended is None:
            self.ended = result
            self.publish(Ended(result))
