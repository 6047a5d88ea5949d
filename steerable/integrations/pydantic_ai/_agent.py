"""A Pydantic AI agent as an agent of the service: one run per turn."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncIterable, AsyncIterator, Callable
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.agent import AbstractAgent, EventStreamHandler, WrapperAgent
from pydantic_ai.exceptions import UsageLimitExceeded
from pydantic_ai.messages import (
    AgentStreamEvent,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
)
from pydantic_ai.models import Model
from pydantic_ai.models.fallback import FallbackModel
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.usage import UsageLimits

from steerable.errors import UsageError
from steerable.events import EventSink, TextDelta
from steerable.integrations._steps import answer_text, until_stopped
from steerable.integrations.pydantic_ai._steering import Steering, serving
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
    :class:`~steerable.events.TextDelta`; a sink that raises is logged, not the turn's end.
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
        run = self.agent.run(
            prompt,
            message_history=steering.history or None,
            capabilities=[steering],
            usage_limits=self.usage_limits,
            deps=self.deps if self.deps_for is None else self.deps_for(turn.session),
            event_stream_handler=self._handler(turn),
        )
        try:
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

    def _handler(self, turn: Turn) -> EventStreamHandler[Any] | None:
        """The run's stream handler: one that sends the text deltas when the turn has a sink
        and the model can stream; else none, and the run goes as it would (no stream)."""
        if turn.events is None or not _streams(self.agent.model):
            return None  # a model that cannot stream would fail the turn: its answer comes whole
        return _text_deltas(turn, turn.events, self.agent.event_stream_handler)


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


def _text_deltas(
    turn: Turn, sink: EventSink, own: EventStreamHandler[Any] | None
) -> EventStreamHandler[Any]:
    """A handler of the run's stream that sends ``sink`` each piece of the model's text.

    Only text parts: not thinking, not tool-call arguments, not the tools' events. ``own``,
    the agent's own handler (which a run's handler replaces), is handed the same events. A
    sink that raises loses the turn's live view, not the turn: the error is logged once and
    the rest of the turn's deltas are not sent (the stored answer is whole either way).
    """
    broken = False

    async def watched(events: AsyncIterable[AgentStreamEvent]) -> AsyncIterator[AgentStreamEvent]:
        nonlocal broken
        async for event in events:
            piece = _text_piece(event)
            if piece and not broken:
                try:
                    produced = sink(TextDelta(piece))
                    if inspect.isawaitable(produced):
                        await produced
                except Exception:  # CancelledError is not an Exception: a stop still stops
                    broken = True
                    log.exception(
                        "session %r, turn %r: the live sink raised; no more text deltas are sent",
                        turn.session,
                        turn.id,
                    )
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
