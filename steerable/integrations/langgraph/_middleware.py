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
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, NotRequired

from langchain.agents.middleware import AgentMiddleware, AgentState
from langchain.agents.middleware.types import PrivateStateAttr
from langchain_core.messages import AnyMessage, RemoveMessage
from langgraph.channels.untracked_value import UntrackedValue
from langgraph.runtime import Runtime

from steerable.errors import UsageError
from steerable.integrations._steps import Steps
from steerable.integrations.langgraph._records import (
    from_stored,
    rebuilt_ids,
    steer_message,
    stored_ids,
    to_stored,
    unanswered_tail,
)
from steerable.messages import Message, new_id
from steerable.session import Session
from steerable.store import check_count

__all__ = ["SteeringMiddleware"]

_ASYNC_ONLY = "SteeringMiddleware stores through an async session: run the graph with ainvoke"


class SteeringState(AgentState[Any]):
    """``create_agent``'s state with the id of the run that began it (never checkpointed).

    Every node of a run gets its own asyncio task, so no task tells one run from another;
    this run-scoped value (``UntrackedValue``, like langchain's own run-level counters) does.
    """

    steerable_run: NotRequired[Annotated[str, UntrackedValue, PrivateStateAttr]]


class SteeringMiddleware(AgentMiddleware[SteeringState, Any, Any]):
    """Takes ``session``'s steers before each model call and stores the conversation.

    ``steers`` is how many steers one run (one ``ainvoke``) takes at most; the rest wait
    for the next run. The conversation goes into ``session``'s transcript at every step:
    the prompt and the steers as steerable user messages, the graph's other messages as
    :class:`~steerable.Native` records (:mod:`steerable.integrations.langgraph`).

    One run at a time: a run that begins while another is under way takes the middleware
    over, and the run it took it from fails at its next step with :class:`UsageError`,
    storing nothing more (their messages would interleave in one transcript). No hook
    runs when a run fails or is cancelled, so a live run cannot be told from a dead one
    at the newcomer's start: the older run is the one refused.
    """

    state_schema = SteeringState

    def __init__(self, session: Session, *, steers: int = 16) -> None:
        super().__init__()
        if not isinstance(session, Session):
            raise UsageError(f"SteeringMiddleware needs a steerable Session, not {session!r}")
        self.session = session
        self.steers = check_count(steers, "steers")
        self._steps: Steps | None = None
        self._ids: set[str] = set()
        self._run: str | None = None  # the run that holds the middleware

    def __repr__(self) -> str:
        return f"SteeringMiddleware({self.session!r}, steers={self.steers})"

    @property
    def taken(self) -> list[Message]:
        """The steers this run took so far, in order."""
        return [] if self._steps is None else list(self._steps.taken)

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
        """A new run: it holds the middleware, its steer count starts again, and what is
        stored is read afresh."""
        self._run, self._steps = new_id(), None
        return {"steerable_run": self._run}

    async def abefore_model(
        self, state: SteeringState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Store what the graph added and take the waiting steers, in one store call."""
        run = self._hold(state)
        messages = list(state["messages"])
        steps = await self._begin()
        # What the store holds past the graph's state: an earlier attempt's step whose
        # checkpoint was lost with its process.
        dropped, behind = _behind(steps.stored, messages)
        new = self._new([m for m in messages if m.id not in dropped])
        taken = await steps.step(new)
        self._ids.update(m.id for m in [*new, *taken])
        back: list[Any] = [RemoveMessage(id=id) for id in dropped]
        back += from_stored(behind) + [steer_message(m) for m in taken]
        return {"messages": back, "steerable_run": run}

    async def aafter_agent(
        self, state: SteeringState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Store the run's last messages (its answer), taking no steer: a steer that came
        while the model wrote the answer waits for the next run."""
        self._hold(state)
        await self.finish(state["messages"])
        return None

    async def finish(self, messages: Sequence[AnyMessage]) -> None:
        """Store ``messages``' new ones, taking no steer; a tail of tool calls that have no
        result (a run cut short) is left out, so the transcript stays valid."""
        steps = await self._begin()
        complete = list(messages[: len(messages) - unanswered_tail(messages)])
        new = self._new(complete)
        await steps.save(new)
        self._ids.update(m.id for m in new)

    def _hold(self, state: SteeringState) -> str:
        """The id of the run of ``state``, refused unless that run holds the middleware.

        A run resumed after an interrupt has no id (untracked values are not checkpointed):
        it takes the middleware, as a new run would."""
        run = state.get("steerable_run")
        if run is None:
            self._run = new_id()
            return self._run
        if run != self._run:
            raise UsageError(
                "another run of this SteeringMiddleware began while this one ran: one run"
                " of a session at a time (this run stops here, storing nothing more)"
            )
        return run

    async def _begin(self) -> Steps:
        if self._steps is None:
            stored = await self.session.messages()
            self._steps = Steps(self.session, stored, steers=self.steers)
            self._ids = stored_ids(stored)
        return self._steps

    def _new(self, messages: Sequence[AnyMessage]) -> list[Message]:
        return [to_stored(m) for m in messages if m.id not in self._ids]


def _behind(
    stored: Sequence[Message], messages: Sequence[AnyMessage]
) -> tuple[list[str], list[Message]]:
    """What the graph's state lacks of the store: (ids to drop from it, stored messages).

    The anchor is the state's last message that is stored. What the store has after it
    was stored by a step the state never saw: a crash lost that step's checkpoint. If it
    is only steers (the process died between a take and the checkpoint), they are given
    back. If it is more (the graph ran the step again, so its replies and tool results
    have new ids), the store wins: the state's messages after the anchor are dropped and
    the stored ones put in their place. A state with none of the stored messages (a
    fresh thread) gets nothing.
    """
    ids = stored_ids(stored)
    anchor = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].id in ids), -1)
    if anchor < 0:
        return [], []
    at = next(i for i, m in enumerate(stored) if messages[anchor].id in rebuilt_ids(m))
    tail = list(stored[at + 1 :])
    in_state = {m.id for m in messages}
    if all(m.steered for m in tail):
        return [], [m for m in tail if m.id not in in_state]
    dropped = [m.id for m in messages[anchor + 1 :] if m.id is not None]
    return dropped, tail
