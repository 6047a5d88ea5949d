"""The ReAct pattern: ask the model, run the tools it calls, repeat until it answers.

A *step* is the point right before each model request (the first request's too), when
every tool call of the last reply has its result. At every step, and only there, the run
collects waiting steers: its in-memory box first, then (with a session) the session's store.
They are appended where the run has got to, after the tool results, and stay there: a
steer is never re-read as a fresh instruction on a later step, never put between a tool
call and its result. With a session the step is one store call that saves what is new and
takes the session's steers atomically, so a crash can neither lose a taken steer nor let a
redone step take it twice. A steer from the box joins the run only once that save commits;
if it fails, the steer is unapplied (and left in the store if the store can be reached).

A run that dies mid-step redoes that step when resumed from the store, so a plain tool can
run twice for one call. A tool marked ``side_effects`` is journaled (:mod:`steerable.journal`):
with a session, the reply that calls it is stored before its calls run, each call is marked
started in the session's journal and its result recorded as it ends, and a run given a
transcript that ends with that reply carries its calls on without running a finished one
again. What the run is given is repaired first (:mod:`steerable.repair`): a tool call with
no result in the middle of it gets an error result saying its outcome is unknown, stored
once.

The pattern runs in the run's task and is driven through a :class:`Control`: it never sees
the public :class:`steerable.Run`. :data:`PATTERNS` maps each :data:`PatternName` to its code.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Literal, Protocol

from steerable import telemetry
from steerable._control import Control, Stopped
from steerable.compaction import model_view
from steerable.errors import ModelError, TranscriptConflict
from steerable.events import (
    Ended,
    Event,
    EventSink,
    ModelRequested,
    Repaired,
    Replied,
    Saved,
    SteersTaken,
    ToolEnded,
    ToolStarted,
)
from steerable.journal import UNKNOWN, ToolContext, call_key
from steerable.messages import Message, ToolCall, ToolResult
from steerable.models.base import (
    FinishReason,
    Model,
    ModelEvent,
    ModelRequest,
    Reply,
    TextDelta,
    Usage,
)
from steerable.repair import plan_repair
from steerable.session import Session
from steerable.spec import EndReason, PatternName, Result, Spec
from steerable.store import Steer, journaling
from steerable.tools import Tool

_STOPPED = "the run was stopped before this call ended"
_CANCELLED = "the run was cancelled before this call ended"
_UNANSWERED = "this call ended without a result"  # every call has one here; never seen


class Pattern(Protocol):
    """One run of a pattern, in the run's task."""

    async def main(self) -> Result:
        """Run to the end, publish :class:`Ended` and return the result."""
        ...

    def abandoned(self, error: BaseException) -> Result:
        """The result of a run whose task ended without :meth:`main` returning (cancelled)."""
        ...


PatternFactory = Callable[[Control, Spec, Sequence[Message], Model, EventSink | None], Pattern]


_Known = dict[int, tuple[str, bool, ToolResult | None]]
"""The journaled calls of a reply, by index: their key, whether the journal knew them
(started before), and the result it held (None: started and never ended)."""


class _StoreFailed(Exception):
    """The session's store failed; the run ends without another save."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


class ReAct:
    """One run of the ReAct pattern, driven through its :class:`Control`."""

    def __init__(
        self,
        control: Control,
        spec: Spec,
        messages: Sequence[Message],
        model: Model,
        sink: EventSink | None,
    ) -> None:
        self._control = control
        self._spec = spec
        self._model = model
        self._sink = sink
        self._tools: dict[str, Tool] = {t.name: t for t in spec.tools if isinstance(t, Tool)}
        self._given = len(messages)
        self.transcript: list[Message] = list(messages)
        self._steps = 0
        self._usage = Usage()
        self._finish_reason: FinishReason | None = None
        self._taken: list[Message] = []
        self._output = ""
        self._calls: list[ToolCall] = []  # the calls under way, until their results are in
        self._results: dict[int, ToolResult] = {}
        self._unsaved: list[Steer] = []  # box steers whose step's save has not committed
        self._left: tuple[Steer, ...] | None = None  # the unapplied steers, once the box closed
        self._known: _Known = {}  # the journal's answer for the calls under way
        self._links: list[Any] = []  # links to the spans of the steers this step took
        control.saw(self.transcript)
        if spec.session is not None and any(t.side_effects for t in self._tools.values()):
            journaling(spec.session.store)  # a UsageError now, not when the first call runs

    # -- the run ------------------------------------------------------------------------

    async def main(self) -> Result:
        if telemetry.current_turn() is not None or not telemetry.recording():
            return await self._main(telemetry.current_turn())
        session = self._spec.session
        with telemetry.turn_span(
            "steerable", session.id if session else None, model=self._model.name
        ) as span:
            return await self._main(span)

    async def _main(self, span: Any) -> Result:
        error: BaseException | None = None
        save = self._spec.session is not None
        try:
            reason = await self._react()
        except _StoreFailed as exc:  # a store that just failed is not asked to save again
            reason, error, save = "failed", exc.error, False
        except Exception as exc:  # a model or sink failure ends the run; the transcript stays
            reason, error = "failed", exc
        if self._calls:  # a failure during the tool calls: answer them, keep the transcript valid
            self._answer("the run failed before this call ended")
        unapplied = self._unapplied()
        trouble = await self._finish(unapplied, save=save)
        if trouble is not None and error is None:
            reason, error = "failed", trouble
        result = self._result(reason, error)
        if span is not None:
            _ended(span, result)
        self._control.end(result)
        if self._sink is not None:
            produced = self._sink(Ended(result))
            if inspect.isawaitable(produced):
                await produced
        return result

    def abandoned(self, error: BaseException) -> Result:
        """The result of a run whose task was cancelled: no store call, no sink call."""
        if self._calls:
            self._answer(_CANCELLED)
        self._unapplied()
        return self._result("failed", error)

    async def _react(self) -> EndReason:
        spec = self._spec
        control = self._control
        await self._repair()
        last = self.transcript[-1] if self.transcript else None
        pending = last is not None and last.role == "assistant" and bool(last.tool_calls)
        # a reply whose calls never got results (the run that made it died): carry them on
        if pending and last is not None and await self._run_calls(last, fresh=False):
            return "stopped"
        while True:
            # At max_steps the last results are stored and no request follows: that save
            # takes no steer (no model would see it; it waits for the next turn) and, where
            # the store counts steps, is none.
            final = self._steps >= spec.max_steps
            await self._step(last=final)
            if control.stopping:
                return "stopped"
            if final:
                return "max_steps"
            self._steps += 1
            await self._emit(ModelRequested(self._steps, len(self.transcript)))
            try:
                reply = await control.interruptible(self._request())
            except Stopped:
                return "stopped"
            self.transcript.append(reply.message)
            self._usage += reply.usage
            self._finish_reason = reply.finish_reason
            await self._emit(Replied(reply.message, reply.usage, reply.finish_reason))
            calls = reply.message.tool_calls
            if not calls:
                self._output = reply.message.text
                return "completed"
            if await self._run_calls(reply.message, fresh=True):
                return "stopped"

    def _result(self, reason: EndReason, error: BaseException | None) -> Result:
        return Result(
            transcript=tuple(self.transcript),
            output=self._output if reason == "completed" else "",
            reason=reason,
            steps=self._steps,
            usage=self._usage,
            steers=tuple(self._taken),
            unapplied_steers=self._unapplied(),
            new_messages=tuple(self.transcript[self._given :]),
            error=error,
            finish_reason=self._finish_reason,
        )

    def _unapplied(self) -> tuple[Steer, ...]:
        """Close the box: the steers no request saw, the first time; the same ones later."""
        if self._left is None:
            self._left = (*self._unsaved, *self._control.close())
            self._unsaved = []
        return self._left

    # -- a step -------------------------------------------------------------------------

    async def _step(self, *, last: bool = False) -> None:
        control = self._control
        room = 0 if last else self._spec.steers_per_turn - len(self._taken)
        mine = control.take(room) if room > 0 else []
        session = self._spec.session
        if session is None:
            if mine:
                self._link([(s.id, self._control.traces.get(s.id)) for s in mine], "run")
                await self._join(tuple(s.message() for s in mine), "run")
            return
        at = len(self.transcript)
        if mine:  # they join once the save that records them commits
            self._unsaved = mine
            self.transcript.extend(s.message() for s in mine)
        try:
            taken = await session.save(self.transcript, take=room - len(mine), last=last)
        except BaseException as exc:
            del self.transcript[at:]  # not recorded (as far as the run knows): unapplied
            if isinstance(exc, Exception):
                raise _StoreFailed(exc) from exc
            raise
        self._unsaved = []
        await self._emit(Saved(session.stored or 0))
        if mine:
            joined = tuple(self.transcript[at:])
            self._taken.extend(joined)
            self._link([(s.id, self._control.traces.get(s.id)) for s in mine], "run")
            await self._emit(SteersTaken(joined, "run"))
        if taken:
            control.saw(taken)
            traces = getattr(session.store, "steer_traces", None)
            if callable(traces) and telemetry.recording():
                found = traces([m.id for m in taken])
                self._link([(m.id, found.get(m.id)) for m in taken], "session")
            await self._join(tuple(taken), "session")

    def _link(self, steers: list[tuple[str, dict[str, str] | None]], source: str) -> None:
        """Links from the next model request's span to the spans that sent these steers."""
        for id, found in steers:
            if found:
                attributes = {"steerable.input.id": id, "steerable.steer.source": source}
                self._links.extend(telemetry.links([telemetry.link(found, attributes)]))

    async def _join(self, messages: tuple[Message, ...], source: Literal["run", "session"]) -> None:
        self.transcript.extend(messages)
        self._taken.extend(messages)
        await self._emit(SteersTaken(messages, source))

    async def _finish(self, unapplied: tuple[Steer, ...], *, save: bool) -> Exception | None:
        """The save once the pattern returns, then unapplied steers wait in the store.

        Returns what failed, if anything. Leaving the steers is tried even after the store
        failed (a conflict says nothing about reaching it); the first failure ends it.
        """
        session = self._spec.session
        if session is None:
            return None
        failure: Exception | None = None
        if save:
            try:
                stored = session.stored
                if stored is None or stored < len(self.transcript):
                    await session.save(self.transcript)
                    await self._emit(Saved(session.stored or 0))
            except Exception as exc:
                failure = exc
        for steer in unapplied:
            try:
                await session.steer(steer)
            except Exception as exc:  # unreachable: the steers stay in the result only
                return failure or exc
        return failure

    # -- the model --------------------------------------------------------------------

    async def _request(self) -> Reply:
        links, self._links = self._links, []
        found = telemetry.tracer()
        if found is None:
            return await self._requested()
        provider, model = telemetry.provider_and_model(self._model.name)
        session = self._spec.session
        values: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": model,
            "steerable.step": self._steps,
        }
        if session is not None:
            values["gen_ai.conversation.id"] = session.id
        if links:
            values["steerable.steers"] = len(links)
        with found.start_as_current_span(
            f"chat {model}", kind=_client(), attributes=values, links=links
        ) as span:
            if telemetry.capture_content():
                span.set_attribute("gen_ai.input.messages", _contents(self.transcript))
            reply = await self._requested()
            span.set_attributes(telemetry.usage_attributes(reply.usage))
            if reply.finish_reason is not None:
                span.set_attribute("gen_ai.response.finish_reasons", [reply.finish_reason])
            if telemetry.capture_content():
                span.set_attribute("gen_ai.output.messages", _contents([reply.message]))
            return reply

    async def _requested(self) -> Reply:
        spec = self._spec
        request = ModelRequest(
            spec.instructions, tuple(model_view(self.transcript)), spec.tool_specs, spec.settings
        )
        reply: Reply | None = None
        listened = self._sink is not None or bool(self._control.subs)
        async with _closing(self._model.stream(request)) as stream:
            async for event in stream:
                if isinstance(event, TextDelta):
                    if listened:
                        await self._emit(event)
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

    async def _run_calls(self, message: Message, *, fresh: bool) -> bool:
        """Run ``message``'s calls and append their results; True if stopped meanwhile.

        ``fresh``: the reply was just made (not yet stored), rather than carried on.
        """
        calls = message.tool_calls
        self._known = await self._journal(message, fresh=fresh)
        self._calls, self._results = calls, {}
        try:
            await self._control.interruptible(self._call_tools(calls))
        except Stopped:
            self._answer(_STOPPED)
            return True
        self._answer(_UNANSWERED)
        return False

    async def _journal(self, message: Message, *, fresh: bool) -> _Known:
        """Store a fresh reply with journaled calls, then mark those calls started."""
        session = self._spec.session
        calls = message.tool_calls
        journaled = [i for i, c in enumerate(calls) if self._side_effects(c)]
        if session is None or not journaled:
            return {}
        keys = {i: call_key(session.id, message.id, calls[i].id) for i in journaled}
        try:
            if fresh:  # a resumed run must find these very calls, not ask the model again
                await session.save(self.transcript)
                await self._emit(Saved(session.stored or 0))
            known = await session.begin_calls(list(keys.values()))
        except Exception as exc:
            raise _StoreFailed(exc) from exc
        return {i: (key, key in known, known.get(key)) for i, key in keys.items()}

    def _side_effects(self, call: ToolCall) -> bool:
        tool = self._tools.get(call.name)
        return tool is not None and tool.side_effects

    async def _repair(self) -> None:
        """Repair orphaned tool calls in what the run was given; with a session, store the
        repair of what is stored (what the run was given beyond that is saved at its step)."""
        repair = plan_repair(self.transcript)
        if repair is None:
            return
        fixed = [*self.transcript[: repair.at], *repair.messages]
        session = self._spec.session
        if session is not None:
            try:
                await self._store_repair(session, fixed)
            except Exception as exc:
                raise _StoreFailed(exc) from exc
        self.transcript[:] = fixed
        self._given = min(self._given, len(self.transcript))
        await self._emit(Repaired(repair.at, repair.problems))

    async def _store_repair(self, session: Session, fixed: list[Message]) -> None:
        """Swap the stored tail that differs from ``fixed`` (a compare-and-swap)."""
        stored = await session.messages()  # under the service: the claim's copy, no read
        count = len(stored)
        if [m.id for m in stored] != [m.id for m in self.transcript[:count]]:
            raise TranscriptConflict(session.id, len(self.transcript), count)
        unsaved = {m.id for m in self.transcript[count:]}
        end = next((i for i, m in enumerate(fixed) if m.id in unsaved), len(fixed))
        at = next(
            (i for i, (a, b) in enumerate(zip(stored, fixed[:end], strict=False)) if a != b),
            min(count, end),
        )
        if at < count or at < end:
            await session.replace(at, [m.id for m in stored[at:]], fixed[at:end])

    async def _call_tools(self, calls: list[ToolCall]) -> None:
        if len(calls) == 1:  # in the run's own task: a stop cancels it there
            await self._call_tool(0, calls[0])
            return
        try:
            async with asyncio.TaskGroup() as group:
                for index, call in enumerate(calls):
                    group.create_task(self._call_tool(index, call))
        except ExceptionGroup as failed:  # a sink raised: the run fails with its error
            raise failed.exceptions[0] from failed

    async def _call_tool(self, index: int, call: ToolCall) -> None:
        found = telemetry.tracer()
        if found is None:
            await self._called(index, call)
            return
        values: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.id,
            "gen_ai.tool.type": "function",
        }
        session = self._spec.session
        if session is not None:
            values["gen_ai.conversation.id"] = session.id
        if telemetry.capture_content():
            values["gen_ai.tool.call.arguments"] = call.arguments
        with found.start_as_current_span(f"execute_tool {call.name}", attributes=values) as span:
            try:
                await self._called(index, call)
            finally:
                result = self._results.get(index)
                if result is not None:
                    if telemetry.capture_content():
                        span.set_attribute("gen_ai.tool.call.result", result.content)
                    if result.is_error:
                        telemetry.failed(span, result.content, "tool_error")
                if index in self._known:
                    span.set_attribute("steerable.tool.journaled", True)
                    span.set_attribute("steerable.tool.replayed", self._known[index][2] is not None)

    async def _called(self, index: int, call: ToolCall) -> None:
        key, started, recorded = self._known.get(index, (None, False, None))
        if recorded is not None:  # it ran to its end before: never again
            self._results[index] = recorded
            await self._emit(ToolEnded(call, recorded, replayed=True))
            return
        await self._emit(ToolStarted(call))
        tool = self._tools.get(call.name)
        if tool is None:
            known = ", ".join(sorted(self._tools)) or "none"
            result = ToolResult(
                call.id, call.name, f"there is no tool named {call.name!r} (tools: {known})", True
            )
        elif started and not tool.idempotent:  # it began and its end is unknown
            result = ToolResult(call.id, call.name, UNKNOWN, True)
        else:
            session = self._spec.session
            context = ToolContext(
                call,
                key or call_key(session.id if session else None, self._reply_id(), call.id),
                session.id if session else None,
                retried=started,
            )
            result = await tool.run(call, default_timeout=self._spec.tool_timeout, context=context)
        if key is not None:
            result = await self._record(key, result)
        self._results[index] = result
        await self._emit(ToolEnded(call, result))

    async def _record(self, key: str, result: ToolResult) -> ToolResult:
        """Record a journaled call's result; the journal's first one is the result."""
        session = self._spec.session
        assert session is not None  # a key is only made with a session
        try:
            return await session.end_call(key, result)
        except Exception as exc:
            raise _StoreFailed(exc) from exc

    def _reply_id(self) -> str:
        """The id of the reply whose calls run now (the last assistant message)."""
        for message in reversed(self.transcript):
            if message.role == "assistant":
                return message.id
        return ""

    def _answer(self, missing: str) -> None:
        """Append the results in call order; a call without one gets an error saying why."""
        results = [
            self._results.get(i) or ToolResult(c.id, c.name, missing, True)
            for i, c in enumerate(self._calls)
        ]
        self.transcript.append(Message("user", tuple(results)))
        self._calls = []

    # -- events -------------------------------------------------------------------------

    async def _emit(self, event: Event) -> None:
        if self._sink is not None:
            produced = self._sink(event)
            if inspect.isawaitable(produced):
                await produced
        self._control.publish(event)


def _ended(span: Any, result: Result) -> None:
    """The turn's outcome on its ``invoke_agent`` span."""
    span.set_attribute("steerable.turn.reason", result.reason)
    span.set_attribute("steerable.turn.steps", result.steps)
    span.set_attribute("steerable.turn.steers", len(result.steers))
    span.set_attributes(telemetry.usage_attributes(result.usage))
    if result.reason == "failed":
        telemetry.failed(span, result.error)


def _client() -> Any:
    from opentelemetry.trace import SpanKind

    return SpanKind.CLIENT


def _contents(messages: Sequence[Message]) -> str:
    """Messages as the conventions' JSON (role and parts), for opted-in content."""
    return telemetry.content(
        [{"role": m.role, "parts": [telemetry.part(p) for p in m.parts]} for m in messages]
    )


PATTERNS: Mapping[PatternName, PatternFactory] = {"react": ReAct}
"""The code of each pattern a :class:`steerable.Spec` can name."""


@contextlib.asynccontextmanager
async def _closing(stream: AsyncIterator[ModelEvent]) -> AsyncIterator[AsyncIterator[ModelEvent]]:
    """Close an async generator even when the request is cancelled mid-stream."""
    try:
        yield stream
    finally:
        close = getattr(stream, "aclose", None)
        if close is not None:
            await close()
