"""An ADK agent as an agent of the steerable service.

Each turn runs ADK's own :class:`~google.adk.runners.Runner` over the turn's session,
through a :class:`SteerableSessionService` bound to the turn's fenced session, with the
:class:`SteeringPlugin` first among the plugins. A fresh turn gives ADK its prompt as the
new message (stored under the prompt's id); a turn another holder began (``turn.resumed``,
its prompt stored) resumes the prompt's own invocation from the stored transcript, so the
run carries on from its last stored step and takes no steer twice. The turn's session is
the tool journal's (:func:`~steerable.integrations._journal.journal_session`); a resumed
turn whose stored reply has calls without responses (its process died in a journaled tool)
runs in a resumable App, so that ADK runs those stored calls, under their ids, before it
asks the model anything (see :class:`_ReplayOnly`).

A turn with a live sink (``turn.events``) runs with ADK's SSE streaming and sends each
piece of the model's text to the sink as a :class:`~steerable.models.base.TextDelta`, and
each tool call's start and end as :class:`~steerable.events.ToolStarted` and
:class:`~steerable.events.ToolEnded` (see :mod:`._live`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import warnings
from collections.abc import Sequence

from google.adk.agents._streaming_mode import StreamingMode  # run_config uses, not exports, it
from google.adk.agents.base_agent import BaseAgent
from google.adk.agents.callback_context import CallbackContext
from google.adk.agents.llm_agent import LlmAgent
from google.adk.agents.run_config import RunConfig
from google.adk.apps import App, ResumabilityConfig
from google.adk.events.event import Event
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import Runner
from google.adk.sessions.session import Session as AdkSession
from google.genai import types

from steerable.errors import UsageError
from steerable.integrations._journal import journal_session
from steerable.integrations.adk import _records, _warm
from steerable.integrations.adk._journaled import noting_answers
from steerable.integrations.adk._live import Live, LiveTools
from steerable.integrations.adk._plugin import SteeringPlugin
from steerable.integrations.adk._sessions import SteerableSessionService
from steerable.messages import Message, Native
from steerable.service.agent import Turn
from steerable.service_store import Outcome

__all__ = ["ADKAgent"]

log = logging.getLogger("steerable.integrations.adk")

STEERS_PER_TURN = 16


class ADKAgent:
    """Runs ``agent`` (the root of an ADK app) for each turn of the service.

    ``steers_per_turn`` is 16 for an ``LlmAgent`` root and 0 for a workflow root, whose
    steps take no steer (each steer is then a turn of its own). ``plugins`` run after the
    steering plugin; ``run_config`` is given to every run. A turn with a live sink runs
    with ``StreamingMode.SSE`` (unless ``run_config`` streams already or asks for the
    deferred service tier, which cannot stream): the sink gets each piece of the model's
    text as it arrives, or a whole reply of a model that sent it in one piece.

    Unless ``warm_up`` is False, building the first ADKAgent of a process does one tiny
    keyless ADK run (see :mod:`._warm`): ADK's first run imports its run machinery on the
    event loop, holding it long enough (up to about a second) to lose a short lease. The
    constructor waits for it (about 0.5 s, at most 30 s), blocking a running loop it is
    built on: build the agent before the replica serves. The warm-up's spans are left
    unsampled (an SDK's default sampler records none), and a real model's own lazy
    imports are not warmed. ADK's own OpenTelemetry spans of a turn nest under the turn's
    ``invoke_agent`` span, ``gen_ai.conversation.id`` the session.
    """

    def __init__(
        self,
        agent: BaseAgent,
        *,
        app_name: str = "steerable",
        user_id: str = "steerable",
        plugins: Sequence[BasePlugin] = (),
        run_config: RunConfig | None = None,
        warm_up: bool = True,
    ) -> None:
        if not isinstance(agent, BaseAgent):
            raise UsageError(f"ADKAgent takes an ADK agent, not {type(agent).__name__}")
        self.agent = agent
        self.app_name = app_name
        self.user_id = user_id
        self.plugins = list(plugins)
        self.run_config = run_config
        if warm_up:
            _warm.warm_up()

    def __repr__(self) -> str:
        return f"ADKAgent({self.agent.name!r})"

    @property
    def steers_per_turn(self) -> int:
        """16 for an LlmAgent root; 0 for a workflow root (it has no step of ours)."""
        return STEERS_PER_TURN if isinstance(self.agent, LlmAgent) else 0

    async def run_turn(self, turn: Turn) -> Outcome:
        """Run (or resume) the turn's invocation to its end, or until the turn is stopped."""
        store_session = turn.store_session
        service = SteerableSessionService(
            session_for=lambda _: store_session, steers=turn.steers_left, author=self.agent.name
        )
        stored = _stored(turn)
        adopted = service.adopt(
            self.app_name, self.user_id, turn.session, stored, prompt=turn.prompt.id
        )
        invocation = _invocation_of(stored, turn.prompt.id, self.agent.name)
        # a reply stored with its calls unanswered (the process died in a tool): ADK runs
        # those calls (the same ids) before it asks the model anything, in a resumable App
        replay = invocation is not None and _calls_open(adopted)
        live = None if turn.events is None else Live(turn.events)
        app = App(
            name=self.app_name,
            root_agent=self.agent,
            plugins=[
                SteeringPlugin(service),
                *([LiveTools(live, service)] if live is not None else []),
                *([_ReplayOnly()] if replay else []),
                *self.plugins,
            ],
            resumability_config=_resumable() if replay else None,
        )
        runner = Runner(app=app, session_service=service)
        new_message = None
        if invocation is None:
            new_message = types.Content(role="user", parts=[types.Part(text=turn.prompt.text)])
        abort = asyncio.Event()
        watch = asyncio.create_task(_abort_when_stopped(turn, abort))
        final = ""
        try:
            with contextlib.ExitStack() as scope:
                scope.enter_context(journal_session(store_session))  # its tools' journal
                if live is not None:  # a journaled call the journal answers is noted
                    scope.enter_context(noting_answers(live.answered))
                async for event in runner.run_async(
                    user_id=self.user_id,
                    session_id=turn.session,
                    invocation_id=invocation,
                    new_message=new_message,
                    run_config=self.run_config if live is None else _streaming(self.run_config),
                    abort_signal=abort,
                ):
                    if live is not None:
                        await live.see(event)
                    if event.is_final_response() and not event.partial:
                        final = _records.event_text(event) or final
        except Exception:
            if live is not None:
                await live.failed()  # a call that raised ends, with its error
            await service.release(adopted, finished=False)
            raise
        finally:
            watch.cancel()
            await asyncio.gather(watch, return_exceptions=True)
            await runner.close()
        await service.release(adopted, finished=not abort.is_set())
        return Outcome("stopped") if abort.is_set() else Outcome("completed", final)


def _calls_open(session: AdkSession) -> bool:
    """Whether the session's last event is a reply whose function calls have no response."""
    last = session.events[-1] if session.events else None
    return last is not None and last.author != "user" and bool(last.get_function_calls())


def _resumable() -> ResumabilityConfig:
    """ADK's resumability, without the warning that it is experimental (we use one part of
    it, the replay of a stored call, and turn the rest off: :class:`_ReplayOnly`)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ResumabilityConfig(is_resumable=True)


class _ReplayOnly(BasePlugin):
    """Ends the resumability of a run once ADK replayed the stored calls (at its first model
    call): a resumable run would also store an agent-state event after the answer, which
    the service would take for the turn's answer (an assistant message with no calls)."""

    def __init__(self) -> None:
        super().__init__(name="steerable_replay_only")

    async def before_model_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        callback_context._invocation_context.resumability_config = None
        return None


def _streaming(config: RunConfig | None) -> RunConfig:
    """``config`` with SSE streaming, unless it streams already or cannot."""
    config = config if config is not None else RunConfig()
    if config.streaming_mode != StreamingMode.NONE or config.service_tier == "deferred":
        return config  # BIDI is not for run_async; a deferred run cannot stream (ADK refuses)
    return config.model_copy(update={"streaming_mode": StreamingMode.SSE})


def _stored(turn: Turn) -> list[Message]:
    """``turn.messages`` without the prompt the service appended (not stored yet)."""
    messages = turn.messages
    last = messages[-1] if messages else None
    if last is not None and last.id == turn.prompt.id and not last.steered and not _native(last):
        return messages[:-1]
    return list(messages)


def _invocation_of(stored: list[Message], prompt: str, author: str) -> str | None:
    """The invocation the stored prompt started (a retry resumes it), or None."""
    events: list[Event] = _records.events_of(stored, author)
    by_id = {event.id: event for event in events}
    for message in stored:
        if message.id == prompt:
            event = _prompt_event(message) or by_id.get(message.id)
            return event.invocation_id if event is not None else None
    return None


def _native(message: Message) -> bool:
    return any(isinstance(p, Native) for p in message.parts)


def _prompt_event(message: Message) -> Event | None:
    for part in message.natives(_records.FRAMEWORK):
        return Event.model_validate_json(part.data)
    return None


async def _abort_when_stopped(turn: Turn, abort: asyncio.Event) -> None:
    await turn.stopped()
    abort.set()
