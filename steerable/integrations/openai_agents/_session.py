"""The SDK's ``Session`` over a steerable store, and the step where a run takes steers.

One object plays both parts, because both write the same transcript:

- As the SDK's session (``get_items``, ``add_items``) it keeps the run's items verbatim.
  The runner calls ``add_items`` with a turn's items right before it builds the next
  request, and with the final answer's at the end. The first kind waits for that request's
  step; the answer is stored at once, taking no steer.
- As the run's step (:meth:`SteerableSession.step`, the ``call_model_input_filter`` that
  :func:`steering` puts in the run config) it stores what the run handed over and whatever
  the request holds beyond that, and takes the waiting steers: one atomic store call per
  step (:class:`Steps`). A run that ends without an answer (an error, max turns, a tool's
  output as the final output) leaves its last items to :meth:`SteerableSession.flush`.

The SDK rebuilds each request's input from its own lists, which never hold a steer: the
filter puts every steer it took back into every later request, right after the item it
followed. A request whose input does not extend the items this session knows is not the
run's own: a nested run (an agent used as a tool, which runs with the outer run config),
or a request after a handoff whose ``input_filter`` rewrote the history. Such a request
takes no steer, stores nothing, and goes to the user's own filter unchanged.

A history cut to its latest items (``SessionSettings(limit=...)``) is the tail of those
items: the step compares and splices from where the cut begins. The SDK hands each run's
context to a session whose methods take ``wrapper``: a run that goes on after another run
started on the same object fails at its next ``add_items`` with a :class:`UsageError`.

The store is append-only, so ``pop_item`` and ``clear_session`` are refused.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
from collections.abc import Sequence
from typing import Any

from agents import RunConfig, RunContextWrapper, TResponseInputItem
from agents.memory import SessionSettings
from agents.run_config import CallModelData, CallModelInputFilter, ModelInputData

from steerable.errors import UsageError
from steerable.integrations._steps import Steps
from steerable.integrations.openai_agents._items import (
    answered,
    as_dict,
    call_names,
    same_item,
    to_items,
    to_messages,
)
from steerable.messages import Message
from steerable.session import Session
from steerable.store import check_count

__all__ = ["SteerableSession", "steering"]


class SteerableSession:
    """The OpenAI Agents SDK ``Session`` protocol over a steerable :class:`Session`.

    ``steers`` is how many steers one run may take. ``history``, when given, is the
    transcript to start from instead of reading the store (the service's turn: it may end
    with a prompt not stored yet, which the first step stores). One run at a time: give
    each concurrent run its own session id and object.
    """

    session_settings: SessionSettings | None = None

    def __init__(
        self, session: Session, *, steers: int = 16, history: Sequence[Message] | None = None
    ) -> None:
        if not isinstance(session, Session):
            raise UsageError(f"SteerableSession wraps a steerable Session, not {session!r}")
        self.session = session
        self.session_id = session.id
        self.steers = check_count(steers, "steers")
        self._history = None if history is None else list(history)
        self._steps: Steps | None = None
        self._view: list[Any] = []  # the items as the SDK knows them (no steer of this run)
        self._given = 0  # how many of them the SDK handed over (get_items, add_items)
        self._stored = 0  # how many of them are stored
        self._first = 0  # the view's index of a request's first item (a limited history)
        self._run: RunContextWrapper[Any] | None = None  # the run get_items was last called by
        self._stepped = False  # whether a step of this run has stored its items
        self._steered: list[tuple[int, TResponseInputItem]] = []  # (after item n, steer)

    def __repr__(self) -> str:
        return f"SteerableSession({self.session!r}, taken={len(self.taken)})"

    @property
    def taken(self) -> list[Message]:
        """The steered messages the current run took, in order."""
        return [] if self._steps is None else list(self._steps.taken)

    async def _load(self) -> None:
        held: list[Any] = []
        if self._steps is not None:  # a run before this one: store what its end left over
            await self.flush()
            held = self._view[self._stored :]  # a call that waits for its output (an approval)
        if self._history is not None:
            messages, self._history = self._history, None
        else:
            messages = await self.session.messages()
        self._steps = Steps(self.session, messages, steers=self.steers)
        self._view = [item for m in messages for item in to_items(m)] + held
        self._given = len(self._view)
        self._stored = len(self._view) - len(held)
        self._first = 0  # the view's index of a request's first item
        self._stepped = False
        self._steered = []

    async def get_items(
        self, limit: int | None = None, *, wrapper: RunContextWrapper[Any] | None = None
    ) -> list[TResponseInputItem]:
        """The stored transcript as input items (the latest ``limit``), steers in place.

        Each call starts a run's bookkeeping afresh: the runner calls it as a run starts
        (``wrapper`` is that run's context, which the SDK passes to a session that asks).
        """
        await self._load()
        self._run = wrapper
        if limit is not None:  # a SessionSettings(limit=...) run: its requests start later on
            self._first = max(0, len(self._view) - check_count(limit, "limit"))
        return copy.deepcopy(self._view[self._first :])

    async def add_items(
        self, items: list[TResponseInputItem], *, wrapper: RunContextWrapper[Any] | None = None
    ) -> None:
        """Keep the items the runner hands over, for the next step to store with its take.

        The runner hands a turn's items over right before its next request, whose step
        stores them: one store write per step. A batch after which no request follows (the
        final answer; a call waiting for approval) is stored at once, taking no steer.
        """
        if wrapper is not None and self._run is not None and wrapper is not self._run:
            # another run called get_items since: this run's bookkeeping is gone
            raise UsageError(
                "a SteerableSession serves one run at a time, and another run started on it;"
                " give each concurrent run its own session id and SteerableSession"
            )
        if self._steps is None:
            await self._load()
        for item in items:
            as_dict(item)  # not an item: refused now, not at the save it would come to
            if self._given == len(self._view):
                self._view.append(copy.deepcopy(item))
            self._given += 1
        if self._ends_run(items):
            await self.flush()

    def _ends_run(self, items: Sequence[Any]) -> bool:
        """Whether no request of this run follows ``items``, as far as the items tell: a
        run's input (before its first step) and a batch that ends with a tool's output are
        followed by one; any other (an answer, a call to approve) ends the run. A run that
        ends another way (an error, max turns, a tool's output as the final output) leaves
        its last items to :meth:`flush`."""
        if not items or not self._stepped:
            return False
        return not str(as_dict(items[-1]).get("type")).endswith("_output")

    async def flush(self) -> None:
        """Store what the run handed over that no step stored yet, taking no steer.

        A call without its output is kept back (a provider refuses it), until its output
        comes in the same object's next run (a resumed approval). The service's agent calls
        this as each turn ends; a standalone run that ended by an error, by max turns or
        with a tool's output as its final output should call it too (the next run on this
        object does, first).
        """
        if self._steps is None:
            return
        end = self._stored + answered(self._view[self._stored :])
        if end > self._stored:
            await self._store(self._steps, end, take=False)

    async def pop_item(
        self, *, wrapper: RunContextWrapper[Any] | None = None
    ) -> TResponseInputItem | None:
        """Refused: a steerable store is append-only (a transcript is never rewritten)."""
        raise UsageError("a steerable store is append-only: pop_item cannot remove an item")

    async def clear_session(self, *, wrapper: RunContextWrapper[Any] | None = None) -> None:
        """Refused: a steerable store is append-only; start a new session id instead."""
        raise UsageError("a steerable store is append-only: use a new session id to start over")

    async def _store(self, steps: Steps, end: int, *, take: bool) -> list[Message]:
        """Store the view's items up to ``end`` (and take the steers, if ``take``)."""
        new = to_messages(self._view[self._stored : end], call_names(self._view[: self._stored]))
        taken: list[Message] = []
        if take:
            taken = await steps.step(new)
        else:
            await steps.save(new)
        self._stored = end
        return taken

    def _extends_view(self, items: Sequence[object]) -> bool:
        """Whether a request's ``items`` start with this run's items (else: a nested run)."""
        view = self._view[self._first :]
        return len(items) >= len(view) and all(map(same_item, items, view))

    async def step(self, data: CallModelData[Any]) -> ModelInputData:
        """The run's step: store what the request adds, take steers, splice them all in."""
        steps = self._steps
        if steps is None:  # no run read this session: its items are not the run's
            raise UsageError(
                "steering(session) steers a run that keeps its items in that session:"
                " pass session=<the same SteerableSession> to Runner.run"
            )
        model_data = data.model_data
        items = list(model_data.input)
        if not self._extends_view(items):
            return model_data
        first = self._first
        self._view.extend(copy.deepcopy(items[len(self._view) - first :]))
        self._stepped = True
        for message in await self._store(steps, len(self._view), take=True):
            self._steered.append((len(self._view), {"role": "user", "content": message.text}))
        spliced: list[TResponseInputItem] = []
        steered = iter(self._steered)
        following = next(steered, None)
        for index, item in enumerate([*items, None], start=first):
            while following is not None and following[0] == index:
                spliced.append(copy.deepcopy(following[1]))
                following = next(steered, None)
            if item is not None:
                spliced.append(item)
        return ModelInputData(input=spliced, instructions=model_data.instructions)


def steering(session: SteerableSession, run_config: RunConfig | None = None) -> RunConfig:
    """``run_config`` (or a default one) whose requests take ``session``'s steers.

    Run with ``Runner.run(agent, input, run_config=..., session=session)``. The config's own
    ``call_model_input_filter`` still runs, after the step, on the input with the steers.
    """
    if not isinstance(session, SteerableSession):
        raise UsageError(f"steering takes a SteerableSession, not {type(session).__name__}")
    base = run_config if run_config is not None else RunConfig()
    own: CallModelInputFilter | None = base.call_model_input_filter

    async def call_model_input_filter(data: CallModelData[Any]) -> ModelInputData:
        model_data = await session.step(data)
        if own is None:
            return model_data
        result = own(dataclasses.replace(data, model_data=model_data))
        return await result if inspect.isawaitable(result) else result

    return dataclasses.replace(base, call_model_input_filter=call_model_input_filter)
