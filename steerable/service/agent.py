"""What a turn runs: the :class:`Agent` protocol, the :class:`Turn` it is given, and ReAct.

An agent answers one turn at a time. The service hands it a :class:`Turn`: the transcript to
run over (the prompt at its end, unless a resumed turn stored it already), and a
:class:`steerable.Session` whose saves are fenced by the turn's lease. The agent's loop
takes steers at *its own* step by saving through that session with ``take`` (one atomic
store call that stores what is new and takes the steers waiting for the turn); steerable's
own loop does it before every model request, and a framework's integration does it where
that framework builds each request. An agent whose loop has no such step declares
``steers_per_turn = 0``: then every steer is a turn of its own.

A stop (from any replica) and a lost lease reach the agent through :meth:`Turn.stopped`:
it ends its run then, and reports how it ended in an :class:`Outcome`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from steerable.errors import UsageError
from steerable.events import Event, EventSink, Repaired
from steerable.messages import Message
from steerable.models.base import Model, Usage
from steerable.runner import Runner
from steerable.service._failure import Failure
from steerable.service_store import Input, Outcome
from steerable.session import Session
from steerable.spec import EndReason, Result, Spec

__all__ = ["Agent", "ReActAgent", "Turn"]


class Turn:
    """One turn as an agent sees it; made by the service, never by the agent.

    ``session`` is the session id; ``id`` the turn's id (its prompt's); ``prompt`` the input
    that started it; ``messages`` the transcript to run over; ``store_session`` the fenced
    :class:`Session` to save through; ``resumed`` whether an earlier holder ran it (a
    takeover: ``messages`` ends where that holder's last save did); ``steers_left`` how many
    steers it may still take; ``events`` a sink for the run's live events (text deltas).
    """

    __slots__ = (
        "_stop",
        "events",
        "id",
        "messages",
        "prompt",
        "resumed",
        "session",
        "steers_left",
        "store_session",
    )

    def __init__(
        self,
        *,
        session: str,
        id: str,
        prompt: Input,
        messages: list[Message],
        store_session: Session,
        resumed: bool,
        steers_left: int,
        events: EventSink | None = None,
    ) -> None:
        self.session = session
        self.id = id
        self.prompt = prompt
        self.messages = messages
        self.store_session = store_session
        self.resumed = resumed
        self.steers_left = steers_left
        self.events = events
        self._stop = asyncio.Event()

    def __repr__(self) -> str:
        return f"Turn({self.session!r}, {self.id!r}, resumed={self.resumed})"

    def request_stop(self) -> None:
        """Ask the agent to end the turn (the service calls it on a stop or a lost lease)."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        """Whether the turn has been asked to stop."""
        return self._stop.is_set()

    async def stopped(self) -> None:
        """Return once the turn is asked to stop."""
        await self._stop.wait()


@runtime_checkable
class Agent(Protocol):
    """What the service runs for each turn.

    ``steers_per_turn`` is how many steers one turn may take (0: the agent takes none, and
    each steer is a turn of its own). ``run_turn`` runs the turn to its end and says how it
    ended; an exception it raises ends the turn ``failed``.

    An agent may also say ``saves_prompt_first = True``: a new turn's first store call is the
    save of its prompt alone at the turn's start, taking up to ``steers_left`` steers (what
    steerable's own loop does). The service then makes that step with the turn's claim, one
    store call fewer a turn, and answers the agent's first save from it; a first call that
    is anything else is carried on from the stored transcript, as after a failed save.
    """

    @property
    def steers_per_turn(self) -> int:
        """The most steers one turn takes; 0 when the agent's loop takes none."""
        ...

    async def run_turn(self, turn: Turn) -> Outcome:
        """Run ``turn`` to its end (or until :meth:`Turn.stopped`) and report how it ended."""
        ...


_STATES: dict[EndReason, Outcome] = {
    "completed": Outcome("completed"),
    "max_steps": Outcome("max_steps"),
    "stopped": Outcome("stopped"),
    "failed": Outcome("failed"),
}


def usage_of(usage: Usage) -> dict[str, int]:
    """A run's :class:`~steerable.Usage` as an outcome keeps it (``{}`` when no request ran)."""
    if not usage.requests and not usage.total_tokens:
        return {}
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "requests": usage.requests,
    }


def outcome_of(result: Result) -> Outcome:
    """The :class:`Outcome` of a core run's :class:`~steerable.spec.Result`.

    Its usage is the run's: for a turn carried on after a takeover, the part this holder ran.
    """
    error = None if result.error is None else f"{type(result.error).__name__}: {result.error}"
    state = _STATES[result.reason].state
    usage = usage_of(result.usage)
    if state == "failed" and result.error is not None:  # the exception, for the server's log
        return Failure(state, result.output, error, usage, exception=result.error)
    return Outcome(state, result.output, error, usage)


class ReActAgent:
    """steerable's own loop as an agent: a :class:`Spec` and a model for each session.

    ``model`` is a model, or a callable that gives the model for a session id (one model
    per session, say with the session's own settings). The spec's ``steers_per_turn`` is the
    turn's cap; its ``session`` must be None (the service gives each turn its own).
    """

    def __init__(self, spec: Spec, model: Model | Callable[[str], Model]) -> None:
        if not isinstance(spec, Spec):
            raise UsageError(f"ReActAgent takes a steerable.Spec, not {type(spec).__name__}")
        if spec.session is not None:
            raise UsageError("the spec of a ReActAgent has no session: each turn gets its own")
        self.spec = spec
        self._model = model

    def __repr__(self) -> str:
        return f"ReActAgent({self.spec.pattern!r}, max_steps={self.spec.max_steps})"

    @property
    def steers_per_turn(self) -> int:
        """The spec's ``steers_per_turn``."""
        return self.spec.steers_per_turn

    @property
    def saves_prompt_first(self) -> bool:
        """True: a new turn's first store call is its prompt's save, taking the steers waiting
        (see :class:`Agent`); not with ``max_steps=0``, whose first save is its last."""
        return self.spec.max_steps > 0

    def model_for(self, session: str) -> Model:
        """The model for ``session``."""
        model = self._model
        if callable(getattr(model, "stream", None)):
            return model  # type: ignore[return-value]
        return model(session)  # type: ignore[operator]

    async def run_turn(self, turn: Turn) -> Outcome:
        """Run the loop over the turn's messages; a stop of the turn stops the run."""
        spec = dataclasses.replace(
            self.spec, session=turn.store_session, steers_per_turn=turn.steers_left
        )
        run = Runner.start(spec, turn.messages, self.model_for(turn.session), _logging(turn))

        async def stop_when_asked() -> None:
            await turn.stopped()
            run.stop()

        stopper = asyncio.create_task(stop_when_asked())
        try:
            result = await run
        finally:
            stopper.cancel()
            await asyncio.gather(stopper, return_exceptions=True)
        return outcome_of(result)


_log = logging.getLogger("steerable.service")


def _logging(turn: Turn) -> EventSink:
    """The turn's events to its sink, and a repair of its transcript to the log as well: an
    operator should know a transcript was mended."""
    watcher = turn.events

    def sink(event: Event) -> None:
        if isinstance(event, Repaired):
            _log.warning(
                "session %r: turn %r repaired orphaned tool calls from position %d: %s",
                *(turn.session, turn.id, event.at, "; ".join(event.problems)),
            )
        if watcher is not None:
            watcher(event)

    return sink
