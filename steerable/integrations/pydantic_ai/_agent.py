"""A Pydantic AI agent as an agent of the service: one run per turn."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncIterable, AsyncIterator, Callable
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.agent import AbstractAgent, EventStreamHandler, WrapperAgent
from pydantic_ai.capabilities import (
    AbstractCapability,
    ValidatedToolArgs,
    WrapToolExecuteHandler,
)
from pydantic_ai.exceptions import (
    ApprovalRequired,
    CallDeferred,
    ModelRetry,
    SkipToolExecution,
    ToolFailed,
    ToolFailedError,
    ToolRetryError,
    UsageLimitExceeded,
)
from pydantic_ai.messages import (
    AgentStreamEvent,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ToolCallPart,
    ToolReturn,
    ToolReturnPart,
)
from pydantic_ai.models import Model
from pydantic_ai.models.fallback import FallbackModel
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.usage import UsageLimits

from steerable.errors import UsageError
from steerable.events import Event, EventSink, TextDelta, ToolEnded, ToolStarted
from steerable.integrations._journal import journal_session
from steerable.integrations._steps import answer_text, until_stopped
from steerable.integrations.pydantic_ai._journaled import replays
from steerable.integrations.pydantic_ai._steering import Steering, serving
from steerable.messages import ToolCall, ToolResult
from steerable.service.agent import Turn
from steerable.service_store import Outcome

log = logging.getLogger("steerable.integrations.pydantic_ai")


class PydanticAIAgent:
    """Runs each turn on ``agent``, a Pydantic AI agent, with the turn's session and steers.

    The turn's transcript becomes the run's ``message_history``; a turn carried on after a
    takeover runs on from what is stored (its prompt already in the history, not passed
    again). ``usage_limits`` and ``deps`` go to every run; a usage limit that ends a run ends
    the turn ``max_steps``. ``deps_for``, instead of ``deps``, makes each run's deps from the
    session id (a per-session connection, say). A turn takes at most :attr:`steers_per_turn`
    steers; past that each steer is a turn of its own. A turn with a live sink
    (``turn.events``) runs streamed and sends it each piece of the model's text as a
    :class:`~steerable.events.TextDelta`, and each tool call as it starts
    (:class:`~steerable.events.ToolStarted`) and ends (:class:`~steerable.events.ToolEnded`,
    ``replayed`` for a journaled call answered from the journal); a sink that raises is
    logged, not the turn's end.

    Each run's ``conversation_id`` is the turn's session. Pydantic AI's own OpenTelemetry
    spans (an agent with the ``Instrumentation`` capability, or ``Agent.instrument_all()``)
    use the global tracer provider, so they nest under the turn's ``invoke_agent`` span and
    carry the session as ``gen_ai.conversation.id``.
    """

    steers_per_turn = 16

    def __init__(
        self,
        agent: AbstractAgent[Any, Any],
        *,
        usage_limits: UsageLimits | None = None,
        deps: Any = None,
        deps_for: Callable[[str], Any] | None = None,
    ) -> None:
        if not isinstance(agent, AbstractAgent):
            raise UsageError(
                f"PydanticAIAgent takes a pydantic_ai Agent, not {type(agent).__name__}"
            )
        self.agent = agent
        self.usage_limits = usage_limits
        if deps_for is not None and (deps is not None or not callable(deps_for)):
            raise UsageError("PydanticAIAgent takes deps or deps_for (a callable), not both")
        self.deps = deps
        self.deps_for = deps_for

    def __repr__(self) -> str:
        return f"PydanticAIAgent({self.agent.name or type(self.agent).__name__!r})"

    async def run_turn(self, turn: Turn) -> Outcome:
        """Run the turn to its answer, a usage limit, a failure or a stop."""
        # The claim's transcript, read once: the turn's messages are it plus, unless a
        # resumed turn stored it already, the prompt.
        stored = await turn.store_session.messages()
        prompt = turn.prompt.text if len(turn.messages) > len(stored) else None
        steering = Steering(
            turn.store_session, stored, steers=turn.steers_left, prompt_id=turn.prompt.id
        )
        # An Agent's own Steering(store) stands aside: the turn's Steering is on the fenced session.
        served = serving.set(_innermost(self.agent))
        live = None if turn.events is None else _Live(turn, turn.events)
        capabilities: list[AbstractCapability[Any]] = [steering]
        if live is not None:  # nobody watches: no hook at all
            capabilities.append(_ToolEvents(live))
        run = self.agent.run(
            prompt,
            message_history=steering.history or None,
            # the run's conversation is the session: Pydantic AI's spans carry it
            conversation_id=turn.session,
            capabilities=capabilities,
            usage_limits=self.usage_limits,
            deps=self.deps if self.deps_for is None else self.deps_for(turn.session),
            event_stream_handler=self._handler(live),
        )
        try:
            with journal_session(turn.store_session):  # the turn's journaled tools' journal
                result, stopped = await until_stopped(turn, run)
        except UsageLimitExceeded as exc:
            return Outcome("max_steps", error=str(exc))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return Outcome("failed", error=f"{type(exc).__name__}: {exc}")
        finally:
            serving.reset(served)
        if stopped or result is None:
            return Outcome("stopped")
        return Outcome("completed", answer_text(result.output))

    def _handler(self, live: _Live | None) -> EventStreamHandler[Any] | None:
        """The run's stream handler: one that sends the text deltas when the turn has a sink
        and the model can stream; else none, and the run goes as it would (no stream)."""
        if live is None or not _streams(self.agent.model):
            return None  # a model that cannot stream would fail the turn: its answer comes whole
        return _text_deltas(live, self.agent.event_stream_handler)


class _Live:
    """A turn's live sink, guarded: a sink that raises loses the turn's live view, not the
    turn. The error is logged once and nothing more is sent (what is stored is whole)."""

    def __init__(self, turn: Turn, sink: EventSink) -> None:
        self.turn = turn
        self.sink = sink
        self.broken = False

    async def send(self, event: Event) -> None:
        if self.broken:
            return
        try:
            produced = self.sink(event)
            if inspect.isawaitable(produced):
                await produced
        except Exception:  # CancelledError is not an Exception: a stop still stops
            self.broken = True
            log.exception(
                "session %r, turn %r: the live sink raised; no more live events are sent",
                self.turn.session,
                self.turn.id,
            )


class _ToolEvents(AbstractCapability[Any]):
    """Sends a turn's live sink each tool call as it starts and as it ends.

    Pydantic AI's ``wrap_tool_execute`` hook, so a call whose arguments failed validation
    (the model reads a retry, the tool never starts) is not sent, nor is an output tool,
    and a deferred call (``CallDeferred``, ``ApprovalRequired``) starts but does not end here.
    The result is the text the model reads: the return's text, or for a failed call
    (``ModelRetry``, ``ToolFailed``, the journal's unknown outcome) the error text Pydantic
    AI sends back, ``is_error``; a call that raised anything else (which ends the run) ends
    with that error's text. A journaled call answered from the journal is ``replayed``.
    """

    def __init__(self, live: _Live) -> None:
        self._live = live

    @classmethod
    def get_serialization_name(cls) -> str | None:
        """None: bound to one turn's sink."""
        return None

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: ValidatedToolArgs,
        handler: WrapToolExecuteHandler,
    ) -> Any:
        """Send :class:`ToolStarted`, run the call, send :class:`ToolEnded`."""
        arguments = call.args if isinstance(call.args, str) else call.args_as_json_str()
        started = ToolCall(call.tool_call_id, call.tool_name, arguments)
        await self._live.send(ToolStarted(started))
        replayed: set[str] = set()
        token = replays.set(replayed)
        try:
            result = await handler(args)
        except (CallDeferred, ApprovalRequired):
            raise  # deferred: the call has not ended (its result comes to a later run)
        except SkipToolExecution as skip:  # a hook gave the result: the tool did not run
            await self._live.send(
                ToolEnded(started, _result(started, _return_text(call, skip.result)))
            )
            raise
        except Exception as exc:
            await self._live.send(
                ToolEnded(started, _result(started, _error_text(exc), is_error=True))
            )
            raise
        finally:
            replays.reset(token)
        text = _return_text(call, result)
        ended = ToolEnded(started, _result(started, text), replayed=call.tool_call_id in replayed)
        await self._live.send(ended)
        return result


def _result(call: ToolCall, text: str, *, is_error: bool = False) -> ToolResult:
    return ToolResult(call.id, call.name, text, is_error)


def _return_text(call: ToolCallPart, result: Any) -> str:
    """The text the model reads for ``result``, the call's return."""
    value = result.return_value if isinstance(result, ToolReturn) else result
    part = ToolReturnPart(call.tool_name, value, tool_call_id=call.tool_call_id)
    return part.model_response_str()


def _error_text(exc: Exception) -> str:
    """The text the model reads for a call that raised ``exc``, or that the run ends with."""
    if isinstance(exc, ToolRetryError):
        retry = exc.tool_retry
        if isinstance(retry, ToolReturnPart):
            return retry.model_response_str()
        return retry.content if isinstance(retry.content, str) else str(exc)
    if isinstance(exc, ToolFailedError):
        return exc.tool_failed.model_response_str()
    if isinstance(exc, ModelRetry | ToolFailed):
        return exc.message
    return f"{type(exc).__name__}: {exc}"


def _innermost(agent: AbstractAgent[Any, Any]) -> AbstractAgent[Any, Any]:
    """The Agent a wrapper (a durable one, say) runs: the one its runs' contexts name."""
    while isinstance(agent, WrapperAgent):
        agent = agent.wrapped
    return agent


def _streams(model: object) -> bool:
    """Whether ``model`` answers a streamed request (a model's name: the providers' all do)."""
    if isinstance(model, FunctionModel):
        return model.stream_function is not None
    if isinstance(model, WrapperModel):
        return _streams(model.wrapped)
    if isinstance(model, FallbackModel):
        return all(_streams(m) for m in model.models)
    if isinstance(model, Model):
        return type(model).request_stream is not Model.request_stream
    return True


def _text_deltas(live: _Live, own: EventStreamHandler[Any] | None) -> EventStreamHandler[Any]:
    """A handler of the run's stream that sends ``live`` each piece of the model's text.

    Only text parts: not thinking, not tool-call arguments (the tools' own events go from
    :class:`_ToolEvents`). ``own``, the agent's own handler (which a run's handler replaces),
    is handed the same events.
    """

    async def watched(events: AsyncIterable[AgentStreamEvent]) -> AsyncIterator[AgentStreamEvent]:
        async for event in events:
            piece = _text_piece(event)
            if piece:
                await live.send(TextDelta(piece))
            yield event

    async def handle(ctx: RunContext[Any], events: AsyncIterable[AgentStreamEvent]) -> None:
        stream = watched(events)
        if own is not None:
            await own(ctx, stream)
        async for _ in stream:  # what the agent's handler left: its text is sent too
            pass

    return handle


def _text_piece(event: AgentStreamEvent) -> str:
    """The model's text that ``event`` adds ("" for any other event)."""
    if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
        return event.part.content
    if isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
        return event.delta.content_delta
    return ""
