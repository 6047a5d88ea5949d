"""The ReAct pattern: ask the model, run the tools it calls, repeat until it answers.

A *step* is the point right before each model request (the first request's too), when
every tool call of the last reply has its result. At every step, and only there, the run
collects waiting steers: its in-memory box first, then (with a session) the session's store.
They are appended where the run has got to, after the tool results, and stay there: a
steer is never re-read as a fresh instruction on a later step, never put between a tool
call and its result. With a session the step is one store call that saves what is new and
takes the session's steers atomically, so a crash can neither lose a taken steer nor let a
redone step take it twice.

A run that dies mid-step redoes that step when resumed from the store, so a tool can run
twice for one call.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import Any, TypeVar

from steerable.errors import ModelError
from steerable.events import (
    Ended,
    Event,
    EventSink,
    ModelRequested,
    Replied,
    Saved,
    SteersTaken,
    ToolEnded,
    ToolStarted,
)
from steerable.events import TextDelta as TextDeltaEvent
from steerable.messages import Message, ToolCall, ToolResult
from steerable.models.base import Model, ModelEvent, ModelRequest, Reply, TextDelta, Usage
from steerable.runner import EndReason, Result, Run, Spec
from steerable.store import Steer
from steerable.tools import Tool

_T = TypeVar("_T")


class _Stopped(Exception):
    """The run's stop() cut the current phase short."""


class _StoreFailed(Exception):
    """The session's store failed; the run ends without another save."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


class ReAct:
    """One run of the ReAct pattern; driven by :class:`steerable.Run`."""

    def __init__(
        self,
        run: Run,
        spec: Spec,
        messages: Sequence[Message],
        model: Model,
        sink: EventSink | None,
    ) -> None:
        self._run = run
        self._spec = spec
        self._model = model
        self._sink = sink
        self._tools: dict[str, Tool] = {t.name: t for t in spec.tools if isinstance(t, Tool)}
        self._given = len(messages)
        self.transcript: list[Message] = list(messages)
        self._steps = 0
        self._usage = Usage()
        self._taken: list[Message] = []
        self._output = ""
        self._phase: asyncio.Future[Any] | None = None
        self._results: dict[int, ToolResult] = {}

    # -- the run ------------------------------------------------------------------------

    async def main(self) -> Result:
        error: BaseException | None = None
        store_failed = False
        try:
            reason = await self._react()
        except _StoreFailed as exc:
            reason, error, store_failed = "failed", exc.error, True
        except Exception as exc:  # a model or sink failure ends the run; the transcript stays
            reason, error = "failed", exc
        unapplied = tuple(self._run.take_box())
        if not store_failed:  # a store that just failed is not asked again
            try:
                await self._finish(unapplied)
            except _StoreFailed as exc:
                reason, error = "failed", exc.error
        result = Result(
            transcript=tuple(self.transcript),
            output=self._output if reason == "completed" else "",
            reason=reason,
            steps=self._steps,
            usage=self._usage,
            steers=tuple(self._taken),
            unapplied_steers=unapplied,
            new_messages=tuple(self.transcript[self._given :]),
            error=error,
        )
        await self._emit(Ended(result))
        return result

    async def _react(self) -> EndReason:
        spec = self._spec
        while True:
            await self._step()
            if self._run.stopping:
                return "stopped"
            if self._steps >= spec.max_steps:
                return "max_steps"
            self._steps += 1
            await self._emit(ModelRequested(self._steps, len(self.transcript)))
            try:
                reply = await self._phase_of(self._request())
            except _Stopped:
                return "stopped"
            self.transcript.append(reply.message)
            self._usage += reply.usage
            await self._emit(Replied(reply.message, reply.usage))
            calls = reply.message.tool_calls
            if not calls:
                self._output = reply.message.text
                return "completed"
            self._results = {}
            try:
                await self._phase_of(self._call_tools(calls))
            except _Stopped:
                self._answer(calls, stopped=True)
                return "stopped"
            self._answer(calls, stopped=False)

    def _stopping(self) -> bool:
        return self._run.stopping

    def interrupt(self) -> None:
        """Cancel the model request or tool calls under way (the run's stop)."""
        if self._phase is not None:
            self._phase.cancel()

    async def _phase_of(self, work: Awaitable[_T]) -> _T:
        """Run ``work`` as a task that stop() can cancel without cancelling the run."""
        if self._stopping():
            if inspect.iscoroutine(work):
                work.close()
            raise _Stopped
        task: asyncio.Task[_T] = asyncio.ensure_future(work)
        self._phase = task
        try:
            return await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if self._stopping() and task.cancelled() and not (current and current.cancelling()):
                raise _Stopped from None
            task.cancel()
            raise
        finally:
            self._phase = None

    # -- a step -------------------------------------------------------------------------

    async def _step(self) -> None:
        room = self._spec.steers_per_turn - len(self._taken)
        mine = tuple(s.message() for s in self._run.take_box(room)) if room > 0 else ()
        if mine:
            self._took(mine)
            room -= len(mine)
            await self._emit(SteersTaken(mine, "run"))
        session = self._spec.session
        if session is None:
            return
        try:
            taken = await session.save(self.transcript, take=room)
        except Exception as exc:
            raise _StoreFailed(exc) from exc
        await self._emit(Saved(session.stored or 0))
        if taken:
            self._took(tuple(taken))
            await self._emit(SteersTaken(tuple(taken), "session"))

    def _took(self, messages: tuple[Message, ...]) -> None:
        self.transcript.extend(messages)
        self._taken.extend(messages)

    async def _finish(self, unapplied: tuple[Steer, ...]) -> None:
        """The save once the pattern returns; unapplied steers wait in the session's store."""
        session = self._spec.session
        if session is None:
            return
        try:
            stored = session.stored
            if stored is None or stored < len(self.transcript):
                await session.save(self.transcript)
                await self._emit(Saved(session.stored or 0))
            for steer in unapplied:
                await session.steer(steer)
        except Exception as exc:
            raise _StoreFailed(exc) from exc

    # -- the model --------------------------------------------------------------------

    async def _request(self) -> Reply:
        spec = self._spec
        request = ModelRequest(
            spec.instructions, tuple(self.transcript), spec.tool_specs, spec.settings
        )
        reply: Reply | None = None
        listened = self._sink is not None or self._run.listened
        async with _closing(self._model.stream(request)) as stream:
            async for event in stream:
                if isinstance(event, TextDelta):
                    if listened:
                        await self._emit(TextDeltaEvent(event.text))
                elif isinstance(event, Reply):
                    reply = event
                else:
                    raise ModelError(f"the model streamed something unknown: {event!r}")
        if reply is None:
            raise ModelError(f"{self._model.name}: the stream ended without a reply")
        if reply.message.role != "assistant":
            raise ModelError(f"{self._model.name}: the reply is not the assistant's message")
        return reply

    # -- tools --------------------------------------------------------------------------

    async def _call_tools(self, calls: list[ToolCall]) -> None:
        if len(calls) == 1:
            await self._call_tool(0, calls[0])
            return
        async with asyncio.TaskGroup() as group:
            for index, call in enumerate(calls):
                group.create_task(self._call_tool(index, call))

    async def _call_tool(self, index: int, call: ToolCall) -> None:
        await self._emit(ToolStarted(call))
        tool = self._tools.get(call.name)
        if tool is None:
            known = ", ".join(sorted(self._tools)) or "none"
            result = ToolResult(
                call.id, call.name, f"there is no tool named {call.name!r} (tools: {known})", True
            )
        else:
            result = await tool.run(call, default_timeout=self._spec.tool_timeout)
        self._results[index] = result
        await self._emit(ToolEnded(call, result))

    def _answer(self, calls: list[ToolCall], *, stopped: bool) -> None:
        """Append the results in call order; calls a stop cut short get an error result."""
        results = []
        for index, call in enumerate(calls):
            result = self._results.get(index)
            if result is None:
                result = ToolResult(
                    call.id, call.name, "the run was stopped before this call ended", True
                )
            results.append(result)
        self.transcript.append(Message("user", tuple(results)))

    # -- events -------------------------------------------------------------------------

    async def _emit(self, event: Event) -> None:
        if self._sink is not None:
            produced = self._sink(event)
            if inspect.isawaitable(produced):
                await produced
        self._run.publish(event)


@contextlib.asynccontextmanager
async def _closing(stream: AsyncIterator[ModelEvent]) -> AsyncIterator[AsyncIterator[ModelEvent]]:
    """Close an async generator even when the request is cancelled mid-stream."""
    try:
        yield stream
    finally:
        close = getattr(stream, "aclose", None)
        if close is not None:
            await close()
