"""The SDK's ``Session`` over a steerable store, and the step where a run takes steers.

A :class:`SteerableSession` is first the SDK's session, as its ``SQLiteSession`` is: in a run
given ``session=`` alone, and in every call made outside a run, each ``add_items`` is stored
before it returns, in call order (concurrent calls wait their turn), durable and visible to
every other process; a write that another writer got ahead of is appended after it.
``get_items`` honours ``session_settings.limit``; ``pop_item`` and ``clear_session`` cut and
forget the stored transcript (refused with :class:`~steerable.errors.SessionBusy` while a
turn of the service runs on the session).

A run takes steers only with ``run_config=steering(session)``: the SDK's one hook on each
request is the run config's ``call_model_input_filter``, which a session cannot reach. That
config's ``session_input_callback`` also tells the session, as the run reads its history,
that this run is steered (the callback is the SDK's own, so a user's callback still runs):

- As the SDK's session it keeps the run's items verbatim. The runner calls ``add_items``
  with a turn's items right before it builds the next request, and with the final answer's
  at the end. The first kind waits for that request's step; the answer is stored at once,
  taking no steer.
- As the run's step (:meth:`SteerableSession.step`) it stores what the run handed over and
  whatever the request holds beyond that, and takes the waiting steers: one atomic store
  call per step (:class:`Steps`). A run that ends without an answer (an error, max turns, a
  tool's output as the final output) leaves its last items to :meth:`SteerableSession.flush`.

Either half alone is refused at once rather than left silent: the config without
``session=`` (or with another session object) fails as the run starts or at its first
request, storing nothing. A run given the session without the config stores everything, but
when a steer waits at a point where a steered run would take it (the run's input, a turn's
tool outputs) it fails with a :class:`UsageError` naming ``steering(session)``, after
storing what it was handed; the steer stays waiting. ``steers=0`` makes a session that
takes no steer and never refuses.

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
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, cast

from agents import (
    FunctionTool,
    ItemHelpers,
    RunConfig,
    RunContextWrapper,
    RunHooks,
    TResponseInputItem,
)
from agents.memory import SessionSettings
from agents.memory.session_settings import coerce_session_settings, resolve_session_limit
from agents.run_config import CallModelData, CallModelInputFilter, ModelInputData
from agents.tool_context import ToolContext as SDKToolContext
from openai.types.responses import ResponseFunctionToolCall

from steerable.errors import TranscriptConflict, UsageError
from steerable.integrations._journal import journal_session
from steerable.integrations._steps import Steps
from steerable.integrations.openai_agents._items import (
    answered,
    as_dict,
    call_names,
    checked,
    orphan_outputs,
    pending_calls,
    same_item,
    to_items,
    to_messages,
)
from steerable.integrations.openai_agents._serial import Serial
from steerable.messages import Message
from steerable.repair import ORPHANED
from steerable.session import Session
from steerable.store import check_count

__all__ = ["SteerableSession", "carried_reply", "session_of", "steering"]

# How many times a plain add_items reads the transcript again after another writer got
# ahead of it (each retry follows someone else's success, so it is bounded by the writers).
_APPEND_TRIES = 64


def _settings(value: object) -> SessionSettings:
    if value is None:
        return SessionSettings()
    if not isinstance(value, SessionSettings | Mapping):
        raise UsageError(f"session_settings is a SessionSettings or a dict, not {value!r}")
    try:
        return coerce_session_settings(value if isinstance(value, SessionSettings) else dict(value))
    except (TypeError, ValueError) as exc:
        raise UsageError(f"session_settings: {exc}") from None


class SteerableSession:
    """The OpenAI Agents SDK ``Session`` protocol over a steerable :class:`Session`.

    ``steers`` is how many steers one run may take (0: none, and a run never refuses for a
    waiting steer). ``session_settings`` is the SDK's (``limit``: how many of the latest
    items ``get_items`` returns by default). ``history``, when given, is the transcript to
    start from instead of reading the store (the service's turn: it may end with a prompt
    not stored yet, which the first step stores). One run at a time: give each concurrent
    run its own session id and object.
    """

    def __init__(
        self,
        session: Session,
        *,
        steers: int = 16,
        history: Sequence[Message] | None = None,
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(session, Session):
            raise UsageError(f"SteerableSession wraps a steerable Session, not {session!r}")
        self.session = session
        self.session_id = session.id
        self.steers = check_count(steers, "steers")
        self.session_settings: SessionSettings | None = _settings(session_settings)
        self._history = None if history is None else list(history)
        self._serial = Serial()
        self._steps: Steps | None = None
        self._view: list[Any] = []  # the items as the SDK knows them (no steer of this run)
        self._given = 0  # how many of them the SDK handed over (get_items, add_items)
        self._stored = 0  # how many of them are stored
        self._loaded = 0  # how many the last read gave: a run's first add_items is its input
        self._first = 0  # the view's index of a request's first item (a limited history)
        self._run: RunContextWrapper[Any] | None = None  # the run get_items was last called by
        self._read = False  # a run's get_items came last: steering's callback may claim it
        self._wired = False  # the current run's config is steering(self): its steps store
        self._stepped = False  # whether a step of this run has stored its items
        self._steered: list[tuple[int, TResponseInputItem]] = []  # (after item n, steer)
        # the journal: each model reply of this run by its call ids (journal_hooks tells
        # them), whether any came, and the stored calls a crash left without outputs
        self._replies: dict[str, list[TResponseInputItem]] = {}
        self._hooked = False
        # the stored message holding each call of this step's stored reply, by call id
        self._reply_ids: dict[str, str] = {}
        self._pending: list[dict[str, Any]] = []
        self._carry_at = 0  # the view's index the pending calls and their outputs go before
        # a watched turn's tool hooks (``_live.ToolEvents``), told of each call carried on too
        self._tool_hooks: RunHooks[Any] | None = None

    def __repr__(self) -> str:
        return f"SteerableSession({self.session!r}, taken={len(self.taken)})"

    @property
    def taken(self) -> list[Message]:
        """The steered messages the current run took, in order."""
        return [] if self._steps is None else list(self._steps.taken)

    async def _load(self) -> None:
        held: list[Any] = []
        if self._steps is not None:  # a run before this one: store what its end left over
            await self._flush()
            held = self._view[self._stored :]  # a call that waits for its output (an approval)
        if self._history is not None:
            messages, self._history = self._history, None
        else:
            messages = await self.session.messages()
        self._steps = Steps(self.session, messages, steers=self.steers)
        self._view = [item for m in messages for item in to_items(m)] + held
        self._given = self._loaded = len(self._view)
        self._stored = len(self._view) - len(held)
        self._first = 0
        self._stepped = False
        self._steered = []
        self._replies = {}
        self._reply_ids = {}
        self._hooked = False
        # calls a crash left without outputs (their reply was stored before a journaled
        # call ran): the SDK would drop them from its requests, so the view leaves them out
        # and the run's first step puts them back, with their outputs (_carry_on)
        self._pending = pending_calls(self._view[: self._stored])
        if self._pending:
            self._carry_at = self._stored - len(self._pending)
            del self._view[self._carry_at : self._stored]
            self._stored = self._carry_at
            self._given = self._loaded = len(self._view)
            self._steered = [(self._carry_at, cast(TResponseInputItem, c)) for c in self._pending]

    def _forget(self) -> None:
        """Drop what this object knows of the transcript: its next call reads it again."""
        self._steps = None
        self._view = []
        self._given = self._stored = self._loaded = self._first = 0
        self._stepped = False
        self._steered = []
        self._pending = []

    async def get_items(
        self, limit: int | None = None, *, wrapper: RunContextWrapper[Any] | None = None
    ) -> list[TResponseInputItem]:
        """The stored transcript as input items (the latest ``limit``, by default
        ``session_settings.limit``), steers in place.

        Each call starts a run's bookkeeping afresh: the runner calls it as a run starts
        (``wrapper`` is that run's context, which the SDK passes to a session that asks).
        """
        async with self._serial:
            await self._load()
            if wrapper is None or wrapper is not self._run:  # a new run (the same: a resume)
                self._wired = False
            self._run = wrapper
            self._read = wrapper is not None
            limit = resolve_session_limit(limit, self.session_settings)
            if limit is not None:  # a limited history: the run's requests start later on
                self._first = max(0, len(self._view) - check_count(limit, "limit"))
            return copy.deepcopy(self._view[self._first :])

    async def add_items(
        self, items: list[TResponseInputItem], *, wrapper: RunContextWrapper[Any] | None = None
    ) -> None:
        """Store ``items`` after the stored transcript, before returning.

        In a steered run (``run_config=steering(session)``) a batch that a request follows
        waits for that request's step instead, which stores it with its take: one store
        write per step. A call without its output waits for its output (a provider refuses
        it alone). In a run without that config, a waiting steer is refused (the module).
        """
        async with self._serial:
            if wrapper is not None and self._run is not None and wrapper is not self._run:
                # another run called get_items since: this run's bookkeeping is gone
                raise UsageError(
                    "a SteerableSession serves one run at a time, and another run started on"
                    " it; give each concurrent run its own session id and SteerableSession"
                )
            for item in items:
                checked(item)  # not an item: refused now, with nothing stored
            self._read = False
            if self._steps is None:
                await self._load()
            input_batch = self._given == self._loaded
            for item in items:
                if self._given == len(self._view):
                    self._view.append(copy.deepcopy(item))
                self._given += 1
            in_run = wrapper is not None and wrapper is self._run
            if in_run and not self._wired and self._pending:
                raise UsageError(
                    f"session {self.session_id!r} ends with tool calls a crash interrupted"
                    f" ({', '.join(str(c.get('call_id')) for c in self._pending)}), and this"
                    " run cannot carry them on: its run_config is not steering(session). Carry"
                    " the run on with Runner.run(agent, [], session=session,"
                    " run_config=steering(session), hooks=journal_hooks(session))"
                )
            if in_run and self._wired:
                if self._ends_run(items):
                    await self._flush()
                    if not input_batch:  # (a streamed run hands its input over after a step)
                        self._wired = False  # the run is over: the config alone is refused
                return
            await self._append()
            # where a steered run would take a steer: its input, a turn's outputs (but not a
            # resumed run's first batch, the outputs of its approved calls: its steps claim it)
            if in_run and self.steers and not self._stepped and _followed(items) != input_batch:
                await self._refuse_waiting_steers()

    def _ends_run(self, items: Sequence[Any]) -> bool:
        """Whether no request of this run follows ``items``, as far as the items tell: a
        run's input (before its first step) and a batch that ends with a tool's output are
        followed by one; any other (an answer, a call to approve) ends the run. A run that
        ends another way (an error, max turns, a tool's output as the final output) leaves
        its last items to :meth:`flush`."""
        if not items or not self._stepped:
            return False
        return not _followed(items)

    async def _append(self) -> None:
        """Store what was handed over and is not stored yet, after whatever is stored: a
        writer that got ahead (another object, process or thread) is read, then followed."""
        for _ in range(_APPEND_TRIES):
            try:
                await self._flush()
                return
            except TranscriptConflict:
                pending = self._view[self._stored :]
                ahead = len(self._view) - self._given  # what a step saw beyond the hand-over
                messages = await self.session.messages()
                self._steps = Steps(self.session, messages, steers=self.steers)
                self._view = [item for m in messages for item in to_items(m)] + pending
                self._stored = len(self._view) - len(pending)
                self._given = len(self._view) - ahead
        await self._flush()  # still behind after every try: the conflict goes to the caller

    async def _refuse_waiting_steers(self) -> None:
        waiting = await self.session.steers()
        if waiting:
            raise UsageError(
                f"session {self.session_id!r} has {len(waiting)} steer(s) waiting, and this run"
                " takes none: its run_config is not steering(session). What the run handed over"
                " is stored and the steers wait; carry the run on with Runner.run(agent, [],"
                " session=session, run_config=steering(session))"
            )

    async def flush(self) -> None:
        """Store what the run handed over that no step stored yet, taking no steer.

        A call without its output is kept back (a provider refuses it), until its output
        comes in the same object's next run (a resumed approval). The service's agent calls
        this as each turn ends; a steered standalone run that ended by an error, by max turns
        or with a tool's output as its final output should call it too (the next run on
        this object does, first).
        """
        async with self._serial:
            await self._flush()

    async def _flush(self) -> None:
        if self._steps is None:
            return
        end = self._stored + answered(self._view[self._stored :])
        if end > self._stored:
            await self._store(self._steps, end, take=False)

    async def pop_item(
        self, *, wrapper: RunContextWrapper[Any] | None = None
    ) -> TResponseInputItem | None:
        """Remove the latest stored item and return it (None when there is none).

        The cut is checked against the transcript read just before it: a writer that got
        in between makes it a :class:`~steerable.errors.TranscriptConflict`, nothing cut.
        Refused with :class:`~steerable.errors.SessionBusy` while a turn of the service
        runs on the session; the store must be :class:`~steerable.store.Rewritable`.
        """
        async with self._serial:
            await self._flush()  # what waits for a step is stored first: the cut is of it all
            messages = await self.session.messages()
            self._forget()
            if not messages:
                return None
            at = len(messages) - 1
            items = to_items(messages[at])
            await self.session.truncate(at, length=len(messages))
            if len(items) > 1:  # one message holds a response's calls (or their outputs)
                before = [item for m in messages[:at] for item in to_items(m)]
                rest = to_messages(items[:-1], call_names(before))
                await self.session.save([*messages[:at], *rest])
            return items[-1]

    async def clear_session(self, *, wrapper: RunContextWrapper[Any] | None = None) -> None:
        """Forget the session: its transcript, its waiting steers and its service records.

        Refused with :class:`~steerable.errors.SessionBusy` while a turn of the service runs
        on the session; the store must be :class:`~steerable.store.Rewritable`.
        """
        async with self._serial:
            await self.session.delete()
            self._forget()
            self._history = None

    async def _store(
        self, steps: Steps, end: int, *, take: bool, before: Sequence[Any] = ()
    ) -> list[Message]:
        """Store the view's items up to ``end`` (and take the steers, if ``take``), after
        ``before`` (the outputs of calls carried on, which the view does not hold)."""
        names = call_names([*self._view[: self._stored], *(item for _, item in self._steered)])
        new = to_messages(before, names) + to_messages(self._view[self._stored : end], names)
        taken: list[Message] = []
        if take:
            taken = await steps.step(new)
        else:
            await steps.save(new)
        self._stored = end
        return taken

    def _claim(self) -> None:
        """The current run's config is steering(self): called as the run reads its history."""
        if not self._read:
            raise UsageError(
                "steering(session) is in a run whose session= is another object: pass"
                " session=<the same SteerableSession> with run_config=steering(session)"
            )
        self._read = False
        self._wired = True

    def _cut_orphans(self, history: list[TResponseInputItem]) -> list[TResponseInputItem]:
        """``history`` (the run's read) without the outputs a limited read cut from their
        calls, as the SDK does itself when no callback is set."""
        if self._first == 0:
            return history
        cut = orphan_outputs(history)
        self._first += cut
        return history[cut:]

    def _extends_view(self, items: Sequence[object]) -> bool:
        """Whether a request's ``items`` start with this run's items (else: a nested run)."""
        view = self._view[self._first :]
        return len(items) >= len(view) and all(map(same_item, items, view))

    async def step(self, data: CallModelData[Any]) -> ModelInputData:
        """The run's step: store what the request adds, take steers, splice them all in."""
        async with self._serial:
            steps = self._steps
            model_data = data.model_data
            items = list(model_data.input)
            if steps is None or not (self._extends_view(items) or self._wired):
                # no run read this session, or a run of other items that it does not steer
                raise UsageError(
                    "steering(session) steers a run that keeps its items in that session:"
                    " pass session=<the same SteerableSession> to Runner.run"
                )
            if not self._extends_view(items):  # a nested run's request, or a rewritten history
                return model_data
            first = self._first
            self._replies = {}  # the replies before this request: their tools have run
            self._reply_ids = {}
            outputs: list[dict[str, Any]] = []
            if self._pending and not self._stepped:
                outputs = await self._carry_on(data, self._pending)
                self._pending = []
                self._steered.extend((self._carry_at, cast(TResponseInputItem, o)) for o in outputs)
            self._view.extend(copy.deepcopy(items[len(self._view) - first :]))
            self._stepped = True
            taken = await self._store(steps, len(self._view), take=True, before=outputs)
            for message in taken:
                self._steered.append((len(self._view), {"role": "user", "content": message.text}))
            return ModelInputData(
                input=self._spliced(items, first), instructions=model_data.instructions
            )

    async def _carry_on(
        self, data: CallModelData[Any], pending: Sequence[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """The outputs of the calls a crash left without any (the stored transcript ends with
        the reply that made them, stored before its journaled calls ran): each function call
        run again through the request's agent's tool of its name, so a journaled one is
        replayed, told UNKNOWN or re-run by the journal under its own call id; a call whose
        tool is not among the agent's function tools gets :data:`steerable.repair.ORPHANED`."""
        tools = {t.name: t for t in data.agent.tools if isinstance(t, FunctionTool)}
        outputs: list[dict[str, Any]] = []
        stored = [] if self._steps is None else self._steps.stored
        replies = {
            str(item["call_id"]): reply
            for item in pending
            if (reply := _holding(stored, str(item["call_id"]))) is not None
        }
        with journal_session(self.session), _carrying(replies):
            for item in pending:
                kind = str(item.get("type"))
                tool = tools.get(str(item.get("name"))) if kind == "function_call" else None
                if tool is None:
                    outputs.append(
                        {"call_id": item["call_id"], "output": ORPHANED, "type": f"{kind}_output"}
                    )
                    continue
                call = ResponseFunctionToolCall.model_validate(item)
                context = SDKToolContext(
                    data.context,
                    tool_name=call.name,
                    tool_call_id=call.call_id,
                    tool_arguments=call.arguments,
                    tool_call=call,
                    agent=data.agent,
                )
                if self._tool_hooks is not None:
                    await self._tool_hooks.on_tool_start(context, data.agent, tool)
                output = await tool.on_invoke_tool(context, call.arguments)
                if self._tool_hooks is not None:
                    await self._tool_hooks.on_tool_end(context, data.agent, tool, output)
                outputs.append(dict(ItemHelpers.tool_call_output_item(call, output)))
        return outputs

    def _remember(self, reply: list[TResponseInputItem]) -> None:
        """A model reply of this run, as the SDK will hand it over (``journal_hooks``)."""
        self._hooked = True
        for call_id in call_names(reply):
            self._replies[call_id] = reply

    async def store_reply(self, call_id: str) -> str | None:
        """Store the model reply that made call ``call_id`` (a journaled tool's, about to
        run), unless it is stored: the SDK hands it over only after the reply's tools ran,
        and a crash in between must leave the same call ids to carry on.

        Returns the id of the stored message holding the call (the reply in the journal's
        key: models do not all keep call ids unique across replies), or None for a call
        whose reply is not this run's to store (an agent used as a tool)."""
        async with self._serial:
            known = self._reply_ids.get(call_id)
            if known is not None:
                return known  # stored by another call of the reply
            reply = self._replies.get(call_id)
            if reply is None:
                if not self._hooked:
                    raise UsageError(
                        "a journaled tool ran in a steered run without"
                        " hooks=journal_hooks(session): its reply cannot be stored before"
                        " it runs, so it was not run. Pass Runner.run(..., session=session,"
                        " run_config=steering(session), hooks=journal_hooks(session))"
                    )
                return None  # not this run's reply (an agent used as a tool): not stored here
            if self._steps is None or not self._wired:
                raise UsageError("a journaled tool needs a run with run_config=steering(session)")
            self._view.extend(copy.deepcopy(reply))
            await self._store(self._steps, len(self._view), take=False)
            for call in call_names(reply):  # the reply's messages: the last stored
                held = _holding(self._steps.stored, call)
                if held is not None:
                    self._reply_ids[call] = held
            return self._reply_ids.get(call_id)

    def _spliced(self, items: Sequence[TResponseInputItem], first: int) -> list[TResponseInputItem]:
        """A request's ``items`` (the view's from ``first`` on) with this run's steers in."""
        spliced: list[TResponseInputItem] = []
        steered = iter(self._steered)
        following = next(steered, None)
        while following is not None and following[0] < first:  # before a limited history
            following = next(steered, None)
        for index, item in enumerate([*items, None], start=first):
            while following is not None and following[0] == index:
                spliced.append(copy.deepcopy(following[1]))
                following = next(steered, None)
            if item is not None:
                spliced.append(item)
        return spliced


def _holding(messages: Sequence[Message], call_id: str) -> str | None:
    """The id of the last of ``messages`` that holds call ``call_id`` (an earlier reply may
    have given the same call id: the latest is the reply whose calls run now)."""
    for message in reversed(messages):
        if any(call.id == call_id for call in message.tool_calls):
            return message.id
    return None


# the stored replies of the calls a run carries on, by call id, while it runs them
_CARRIED: ContextVar[Mapping[str, str] | None] = ContextVar(
    "steerable_openai_agents_carried", default=None
)


@contextmanager
def _carrying(replies: Mapping[str, str]) -> Iterator[None]:
    token = _CARRIED.set(dict(replies))
    try:
        yield
    finally:
        _CARRIED.reset(token)


def carried_reply(call_id: str) -> str | None:
    """The id of the stored message holding call ``call_id``, when the call runs as a run
    carries on the calls a crash interrupted (:meth:`SteerableSession.step`)."""
    carried = _CARRIED.get()
    return None if carried is None else carried.get(call_id)


def _followed(items: Sequence[Any]) -> bool:
    """Whether a request follows a batch ending as ``items`` do: with a tool's output."""
    return bool(items) and str(as_dict(items[-1]).get("type")).endswith("_output")


def steering(session: SteerableSession, run_config: RunConfig | None = None) -> RunConfig:
    """``run_config`` (or a default one) whose requests take ``session``'s steers.

    Run with ``Runner.run(agent, input, session=session, run_config=...)``: the config
    without ``session=`` is refused at the run's first request, and with another session
    object as the run starts. The config's own ``call_model_input_filter`` still runs, after
    the step, on the input with the steers; its ``session_input_callback`` runs as ever.
    """
    if not isinstance(session, SteerableSession):
        raise UsageError(f"steering takes a SteerableSession, not {type(session).__name__}")
    base = run_config if run_config is not None else RunConfig()
    own_filter: CallModelInputFilter | None = base.call_model_input_filter
    own_callback = base.session_input_callback

    async def call_model_input_filter(data: CallModelData[Any]) -> ModelInputData:
        model_data = await session.step(data)
        if own_filter is None:
            return model_data
        result = own_filter(dataclasses.replace(data, model_data=model_data))
        return await result if inspect.isawaitable(result) else result

    def session_input_callback(
        history: list[TResponseInputItem], new_items: list[TResponseInputItem]
    ) -> Any:
        # the SDK calls this right after the run's get_items, before its first add_items
        session._claim()
        if own_callback is not None:
            return own_callback(history, new_items)
        return session._cut_orphans(history) + new_items

    _SESSIONS[call_model_input_filter] = session
    return dataclasses.replace(
        base,
        call_model_input_filter=call_model_input_filter,
        session_input_callback=session_input_callback,
    )


# each steering config's filter, and its session: a journaled tool finds its session there
_SESSIONS: weakref.WeakKeyDictionary[object, SteerableSession] = weakref.WeakKeyDictionary()


def session_of(run_config: RunConfig | None) -> SteerableSession | None:
    """The session of ``run_config`` if it is a ``steering(session)`` config."""
    if run_config is None:
        return None
    try:
        return _SESSIONS.get(run_config.call_model_input_filter)
    except TypeError:  # a filter that cannot be a key is not ours
        return None
