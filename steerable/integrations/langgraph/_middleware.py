"""Steers at LangGraph's own step: a ``create_agent`` middleware over a steerable session.

``create_agent`` runs ``before_model`` hooks as graph nodes of their own, between the tools
node and the model node (langchain 1.5's ``factory.py``: the tools node routes to the loop's
entry, the first ``before_model``). What such a node returns under ``"messages"`` goes
through LangGraph's ``add_messages`` reducer into the graph's state and its checkpoint, in
place: after every tool result, before the request the model node builds from the state.
A message whose id the state holds already is replaced where it is, never added twice.

So :class:`SteeringMiddleware` takes the steers there. Its ``before_model`` makes one atomic
store call (:meth:`steerable.integrations.Steps.step`): it stores the messages the graph
added since the last step and takes the waiting steers, recorded right after them; the
steers go back to the graph as ``HumanMessage`` objects whose id is the steer's id.
Hooking ``wrap_model_call`` instead, or returning a ``Command``, would put them after the
model's reply, between a tool call and its result: a transcript providers refuse.

The graph's own checkpointer (any, or none) still holds the graph's state. If the process
dies after a step was stored and before the checkpoint that has it, the retried step
finds in the stored transcript what the state lacks and returns it: a steer taken is
given back under its id (``add_messages`` places it once; the store never gives it
twice), and a step the graph ran again is replaced by the stored one (the store wins).
With no checkpointer the state is only the run's input: the same input again after a turn
that did not finish (a prompt without an id gets a new one) resumes that stored turn
rather than start another (``_catch_up.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, NotRequired

from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain.agents.middleware.types import PrivateStateAttr
from langchain_core.messages import AnyMessage, RemoveMessage
from langgraph.channels.untracked_value import UntrackedValue
from langgraph.config import get_config
from langgraph.runtime import Runtime

from steerable.errors import UsageError
from steerable.integrations._steps import Steps
from steerable.integrations.langgraph._catch_up import behind
from steerable.integrations.langgraph._records import (
    from_stored,
    steer_message,
    stored_ids,
    to_stored,
    unanswered_tail,
)
from steerable.messages import Message, new_id
from steerable.session import Session
from steerable.store import Store, check_count, check_session_id

__all__ = ["SteeringMiddleware"]

_ASYNC_ONLY = "SteeringMiddleware stores through an async session: run the graph with ainvoke"

# The config key a run brings its own session under (LangGraphAgent's turns: the turn's
# fenced session and steer cap). "__" keeps it out of checkpoint metadata.
RUN_SESSION = "__steerable_session"


@dataclass(frozen=True, slots=True)
class RunSession:
    """A run's own session and steer cap, in its config under :data:`RUN_SESSION`."""

    session: Session
    steers: int


class SteeringState(AgentState[Any]):
    """``create_agent``'s state with the id of the run that began it (never checkpointed).

    Every node of a run gets its own asyncio task, so no task tells one run from another;
    this run-scoped value (``UntrackedValue``, like langchain's own run-level counters) does.
    """

    steerable_run: NotRequired[Annotated[str, UntrackedValue, PrivateStateAttr]]


@dataclass(slots=True)
class _Run:
    """The run under way on one session through this middleware."""

    id: str
    session: Session
    steers: int
    steps: Steps | None = None
    ids: set[str] = field(default_factory=set)  # the langchain ids stored


class SteeringMiddleware(AgentMiddleware[SteeringState, Any, Any]):
    """Takes each run's session's steers before each model call and stores the conversation.

    ``SteeringMiddleware(store)``: a run's session is its thread, ``config["configurable"]
    ["thread_id"]`` (``str``'d), so one ``create_agent(...)`` serves every session, as one
    compiled graph serves every thread. ``SteeringMiddleware(session)``: every run is that
    one session, whatever its thread. (``None``: each run brings its session in its
    config, as :class:`LangGraphAgent` turns do.)

    ``steers`` is how many steers one run (one ``ainvoke``) takes at most; the rest wait
    for the next run. The conversation goes into the session's transcript at every step:
    the prompt and the steers as steerable user messages, the graph's other messages as
    :class:`~steerable.Native` records (:mod:`steerable.integrations.langgraph`).

    One run at a time per session: a run that begins on a session while another is under
    way on it takes the session over, and the run it took it from fails at its next step
    with :class:`UsageError`, storing nothing more (their messages would interleave in one
    transcript). No hook runs when a run fails or is cancelled, so a live run cannot be
    told from a dead one at the newcomer's start: the older run is the one refused. Runs
    on other sessions go on side by side.
    """

    state_schema = SteeringState

    def __init__(self, store: Store | Session | None = None, *, steers: int = 16) -> None:
        super().__init__()
        if store is not None and not isinstance(store, Session | Store):
            raise UsageError(
                f"SteeringMiddleware takes a steerable Store (a run's session is its"
                f" thread_id) or a Session, not {store!r}"
            )
        self.session = store if isinstance(store, Session) else None
        self.store = store.store if isinstance(store, Session) else store
        self.steers = check_count(steers, "steers")
        self._runs: dict[str, _Run] = {}  # by session id: the run that holds it

    def __repr__(self) -> str:
        if self.session is not None:
            over = repr(self.session)
        else:
            over = "None" if self.store is None else type(self.store).__name__
        return f"SteeringMiddleware({over}, steers={self.steers})"

    def taken(self, session: str | None = None) -> list[Message]:
        """The steers the run under way on ``session`` took so far, in order (``session``
        may be left out for a middleware over one Session)."""
        if session is None and self.session is not None:
            session = self.session.id
        run = self._runs.get(check_session_id(session))
        return [] if run is None or run.steps is None else list(run.steps.taken)

    # LangGraph calls the sync hooks under invoke/stream: say so rather than block on I/O.
    def before_agent(self, state: SteeringState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Refused: see :meth:`abefore_agent`."""
        raise UsageError(_ASYNC_ONLY)

    def before_model(self, state: SteeringState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Refused: see :meth:`abefore_model`."""
        raise UsageError(_ASYNC_ONLY)

    def after_agent(self, state: SteeringState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Refused: see :meth:`aafter_agent`."""
        raise UsageError(_ASYNC_ONLY)

    async def abefore_agent(
        self, state: SteeringState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """A new run: it holds its session, its steer count starts again, and what is
        stored is read afresh."""
        run = self._begin_run()
        return {"steerable_run": run.id}

    async def abefore_model(
        self, state: SteeringState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Store what the graph added and take the waiting steers, in one store call."""
        run = self._hold(state)
        messages = list(state["messages"])
        steps = await _steps(run)
        # What the store holds past the graph's state: an earlier attempt's step whose
        # checkpoint was lost with its process, or a retry with no checkpointer.
        dropped, stored = behind(steps.stored, messages)
        new = _new(run, [m for m in messages if m.id not in dropped])
        taken = await steps.step(new)
        run.ids.update(m.id for m in [*new, *taken])
        back: list[Any] = [RemoveMessage(id=id) for id in dropped]
        back += from_stored(stored) + [steer_message(m) for m in taken]
        return {"messages": back, "steerable_run": run.id}

    async def aafter_agent(
        self, state: SteeringState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Store the run's last messages (its answer), taking no steer: a steer that came
        while the model wrote the answer waits for the next run. The run lets go of its
        session."""
        run = self._hold(state)
        steps = await _steps(run)
        messages = state["messages"]
        await steps.save(_new(run, messages[: len(messages) - unanswered_tail(messages)]))
        if self._runs.get(run.session.id) is run:
            del self._runs[run.session.id]
        return None

    def _begin_run(self) -> _Run:
        session, steers = self._session_of_run()
        run = _Run(new_id(), session, steers)
        self._runs[session.id] = run  # an older run on the session is refused from now on
        return run

    def _hold(self, state: SteeringState) -> _Run:
        """The run of ``state``, refused unless it still holds its session.

        A run resumed after an interrupt has no id (untracked values are not checkpointed):
        it takes its session, as a new run would."""
        id = state.get("steerable_run")
        if id is None:
            return self._begin_run()
        session, _ = self._session_of_run()
        run = self._runs.get(session.id)
        if run is None or run.id != id:
            raise UsageError(
                f"another run on session {session.id!r} began while this one ran: one run"
                " of a session at a time (this run stops here, storing nothing more)"
            )
        return run

    def _session_of_run(self) -> tuple[Session, int]:
        """The session the run under way stores into, and its steer cap."""
        configurable = _configurable()
        given = configurable.get(RUN_SESSION)
        if isinstance(given, RunSession):
            return given.session, given.steers
        if self.session is not None:
            return self.session, self.steers
        thread = configurable.get("thread_id")
        if self.store is None or thread is None:
            raise UsageError(
                "SteeringMiddleware(store) stores each run into the session of its thread:"
                " run the graph with config={'configurable': {'thread_id': ...}}"
                if self.store is not None
                else "SteeringMiddleware() has no store: give it one, or a Session"
            )
        return Session(check_session_id(str(thread)), self.store), self.steers


def _configurable() -> dict[str, Any]:
    """The running graph's ``config["configurable"]`` ({} outside a graph run)."""
    try:
        config = get_config()
    except RuntimeError:
        return {}
    return dict(config.get("configurable") or {})


async def _steps(run: _Run) -> Steps:
    if run.steps is None:
        stored = await run.session.messages()
        run.steps = Steps(run.session, stored, steers=run.steers)
        run.ids = stored_ids(stored)
    return run.steps


def _new(run: _Run, messages: Sequence[AnyMessage]) -> list[Message]:
    return [to_stored(m) for m in messages if m.id not in run.ids]
