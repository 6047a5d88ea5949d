"""An OpenAI Agents SDK agent as an agent of the service.

Each turn is one ``Runner.run`` over the turn's transcript: a :class:`SteerableSession`
over the turn's fenced store session hands the SDK the stored history (the prompt at its
end, or wherever a resumed turn stored it) and keeps what the run adds, and
:func:`steering` takes the turn's steers at each request. A takeover runs again from what
the last holder stored: the steers it took are history then, never taken again.

When the turn has an event sink (the service's ``live=``), the run is the SDK's streamed run
instead, over the same session and config: each piece of the model's text goes to the sink
as a :class:`~steerable.models.base.TextDelta` as it arrives, and each function tool call
as a :class:`~steerable.events.ToolStarted` and a :class:`~steerable.events.ToolEnded`
(through the run's hooks: see ``_live``); the steps, what is stored and the outcome are
those of ``Runner.run``.

The turn's session is the journal of the run's journaled tools (:func:`journaled`): each
run has ``hooks=journal_hooks(session)``, so a journaled call's reply is stored before it
runs, and a takeover carries a call a crash interrupted on under its own call id.

With an OpenTelemetry SDK set, the run's hooks also make a ``chat`` span per model call
and an ``execute_tool`` span per function tool call under the turn's ``invoke_agent`` span
(``_spans``): the SDK's own tracing is not OpenTelemetry.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from agents import Agent as SDKAgent
from agents import (
    MaxTurnsExceeded,
    RawResponsesStreamEvent,
    RunConfig,
    RunHooks,
    Runner,
    RunResult,
    RunResultStreaming,
)
from openai.types.responses import ResponseTextDeltaEvent

from steerable import telemetry
from steerable.errors import UsageError
from steerable.integrations._journal import journal_session
from steerable.integrations._steps import answer_text, until_stopped
from steerable.integrations.openai_agents._journaled import journal_hooks, noting_answers
from steerable.integrations.openai_agents._live import ToolEvents, Watcher
from steerable.integrations.openai_agents._session import SteerableSession, steering
from steerable.integrations.openai_agents._spans import SpanHooks
from steerable.models.base import TextDelta
from steerable.service.agent import Turn
from steerable.service_store import Outcome
from steerable.store import check_count

__all__ = ["OpenAIAgentsAgent"]

_INTERRUPTED = (
    "tool approval (an interruption) is not supported under the service: the run stopped"
    " at a tool call that needs approval, and a turn has no RunState to resume it from"
)


class OpenAIAgentsAgent:
    """Serve ``agent`` (an ``agents.Agent``) with ``run_config`` and ``max_turns``.

    ``context`` is passed to every run as the SDK's run context; ``context_for``, instead,
    makes each run's context from the session id. A turn takes at most
    :attr:`steers_per_turn` steers; past that each steer is a turn of its own.
    """

    steers_per_turn = 16

    def __init__(
        self,
        agent: SDKAgent[Any],
        *,
        run_config: RunConfig | None = None,
        max_turns: int = 10,
        context: Any = None,
        context_for: Callable[[str], Any] | None = None,
    ) -> None:
        if not isinstance(agent, SDKAgent):
            raise UsageError(f"OpenAIAgentsAgent serves an agents.Agent, not {agent!r}")
        self.agent = agent
        self.run_config = run_config
        self.max_turns = check_count(max_turns, "max_turns")
        if context_for is not None and (context is not None or not callable(context_for)):
            raise UsageError(
                "OpenAIAgentsAgent takes context or context_for (a callable), not both"
            )
        self.context = context
        self.context_for = context_for

    def __repr__(self) -> str:
        return f"OpenAIAgentsAgent({self.agent.name!r}, max_turns={self.max_turns})"

    async def run_turn(self, turn: Turn) -> Outcome:
        """Run the turn to its end, or until it is asked to stop; say how it ended."""
        session = SteerableSession(
            turn.store_session, steers=turn.steers_left, history=turn.messages
        )
        config = steering(session, self.run_config)
        tools: ToolEvents | None = None
        hooks: RunHooks[Any] | None = None
        if turn.events is not None:  # watched: the tool calls' events too
            tools = ToolEvents(Watcher(turn.events, turn.session, turn.id))
            config = tools.run_config(config)
            hooks = tools
        spans: SpanHooks | None = None
        if telemetry.recording():  # an OpenTelemetry SDK is set: the run's spans too
            hooks = spans = SpanHooks(turn.session, config, hooks)
            config = spans.config
        session._tool_hooks = hooks  # the calls a step carries on are not the SDK's
        options: dict[str, Any] = {
            "context": self.context if self.context_for is None else self.context_for(turn.session),
            # a journaled tool's reply is stored before it runs
            "hooks": journal_hooks(session, hooks),
            "max_turns": self.max_turns,
            "run_config": config,
            "session": session,
        }
        # the prompt is the history's (stored or not): nothing new to add
        run: Awaitable[RunResult | RunResultStreaming] = (
            Runner.run(self.agent, [], **options)
            if tools is None
            else self._streamed(tools, options)
        )
        with journal_session(turn.store_session):  # the journal of the turn's tool calls
            outcome = await self._outcome(turn, run)
        if spans is not None:
            spans.close(outcome.error)
        # what the run handed over and no step stored: its end (the answer is stored at
        # once), or what came before an error, max turns or a stop
        await session.flush()
        return outcome

    async def _streamed(self, tools: ToolEvents, options: dict[str, Any]) -> RunResultStreaming:
        """``Runner.run_streamed`` to its end, each text delta of the model sent to the
        watcher of ``tools`` (whose hooks send the tool calls' events).

        Started here, not by the caller, so a stop before this coroutine runs starts no run.
        """
        with noting_answers(tools.answered):  # the run's tasks are started in here
            result = Runner.run_streamed(self.agent, [], **options)
        try:
            async for event in result.stream_events():
                if isinstance(event, RawResponsesStreamEvent) and isinstance(
                    event.data, ResponseTextDeltaEvent
                ):
                    await tools.watcher.send(TextDelta(event.data.delta))
        finally:
            # a stop (our task cancelled) leaves the SDK's run loop task behind: cancel it and
            # wait for it, so the session's flush comes after the run's last add_items
            task = result.run_loop_task
            if task is not None and not task.done():
                result.cancel()
                await asyncio.wait((task,))
        if result.run_loop_exception is not None:  # a failure the stream did not raise
            raise result.run_loop_exception
        return result

    async def _outcome(self, turn: Turn, run: Awaitable[RunResult | RunResultStreaming]) -> Outcome:
        try:
            result, stopped = await until_stopped(turn, run)
        except asyncio.CancelledError:
            raise
        except MaxTurnsExceeded as exc:
            return Outcome("max_steps", error=str(exc))
        except Exception as exc:
            return Outcome("failed", error=f"{type(exc).__name__}: {exc}")
        if stopped or result is None:
            return Outcome("stopped")
        if result.interruptions:  # a run resumes from its RunState: a turn has none to keep
            return Outcome("failed", error=_INTERRUPTED)
        return Outcome("completed", answer_text(result.final_output))
