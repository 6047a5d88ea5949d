"""The capability that takes a session's steers as each model request goes out.

:class:`Steering` sits in Pydantic AI's ``innermost`` tier, so its ``before_model_request``
runs after every other capability's, once the request is complete (the tool returns and
what tools enqueued next to them are in it). There it makes one atomic store call
(:meth:`steerable.integrations.Steps.step`): the messages the run added since the last step,
then the steers waiting, recorded after them. Each steer goes to ``RunContext.enqueue`` as a
request of its own with ``priority="asap"``; Pydantic AI 2.68 delivers what a
``before_model_request`` hook enqueues into the request being prepared (after the hooks, in
``_apply_before_model_request``), so the model reads it right after the tool results, and it
stays in the run's history for every later request. The run goes on: nothing restarts it.

A steer that comes while the model writes its final answer finds no request to ride on; it
stays in the session's box for the next run (or, under the service, becomes a turn).

Given to the Agent (``Agent(model, capabilities=[Steering(store)])``), one instance serves
every run: each run gets a Steering of its own (``for_run``) on the session named by the run's
``conversation_id``. A run not given a history starts from the session's stored transcript,
put in place as the run starts (``before_run``), so a retry after a crash is
``agent.run(None, conversation_id=...)``.

The place in the run's history where the store ends is followed by identity, then by
equality (a history processor that copies messages); a run that no longer holds it (a
processor that dropped or rewrote it, a run not given the stored history) is a
:class:`~steerable.UsageError` before anything is stored out of place or twice.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Sequence
from contextvars import ContextVar
from typing import Any
from weakref import WeakValueDictionary

from pydantic_ai import RunContext
from pydantic_ai.capabilities import (
    AbstractCapability,
    CapabilityOrdering,
    ValidatedToolArgs,
    WrapRunHandler,
    WrapToolExecuteHandler,
)
from pydantic_ai.exceptions import UsageLimitExceeded
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ToolCallPart,
    UserPromptPart,
    repair_messages,
)
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import ToolDefinition

from steerable.errors import UsageError
from steerable.integrations._journal import journal_session
from steerable.integrations._steps import Steps
from steerable.integrations.pydantic_ai._journaled import Running, running
from steerable.integrations.pydantic_ai._records import (
    history,
    record,
    revision,
    steer_id,
    steer_request,
)
from steerable.messages import Message
from steerable.session import Session
from steerable.store import Store, check_count


class Steering(AbstractCapability[Any]):
    """Steers taken at each model request of a run on a session, the run stored at each.

    Given a steerable :class:`~steerable.Store`, it is the Agent's: each run steers and stores
    the session its ``conversation_id`` names, from that session's stored transcript::

        agent = Agent(model, capabilities=[Steering(store)])
        result = await agent.run("hi", conversation_id="chat-1")
        result = await agent.run(None, conversation_id="chat-1")  # the retry after a crash

    Given a :class:`~steerable.Session`, it serves one run, passed as
    ``agent.run(..., capabilities=[Steering(session)])``. ``stored`` is the session's
    transcript when the caller has read it (what :meth:`load` does; pass :attr:`history` as
    the run's ``message_history`` then); without it the run reads it as it starts. A run not
    given a history starts from the stored transcript; one given a history (``message_history=``,
    ``conversation=``) must start from it (a :class:`~steerable.UsageError` at the first step
    otherwise). ``steers`` caps the steers a run takes; ``prompt_id`` is the id to store the
    run's prompt under (a new one by default; a one-run Steering only).
    """

    def __init__(
        self,
        session: Session | Store,
        stored: Sequence[Message] | None = None,
        *,
        steers: int = 16,
        prompt_id: str | None = None,
    ) -> None:
        self._store: Store | None = None
        self._steps: Steps | None = None
        if isinstance(session, Session):
            self._steps = Steps(session, (), steers=steers)
        elif isinstance(session, Store):
            if stored is not None or prompt_id is not None:
                raise UsageError(
                    "Steering(store) serves every run of an Agent: a stored transcript and a "
                    "prompt id belong to one run's Steering(session)"
                )
            self._store = session
        else:
            raise UsageError(
                f"Steering takes a steerable Store or Session, not {type(session).__name__}"
            )
        self._steers = check_count(steers, "steers")
        self.history: list[ModelMessage] = []
        """The Pydantic AI history of the stored transcript, once read (``stored``, or as the run
        starts): what the run starts from."""
        self._stored_parts: list[Any] = []
        self._loaded = False
        if stored is not None:
            self._begin(stored)
        self._anchor: ModelMessage | None = None
        self._prompt_id = prompt_id
        self._prompt_open = True  # the run's first new request may still be its prompt
        self._started = False
        self._messages: list[ModelMessage] | None = None
        self._reply = asyncio.Lock()  # one store of a reply, however many calls it made

    @property
    def steps(self) -> Steps:
        """This run's steps (a :class:`~steerable.UsageError` on an Agent's Steering)."""
        if self._steps is None:
            raise UsageError("an Agent's Steering(store) runs nothing itself: each run has its own")
        return self._steps

    def _begin(self, stored: Sequence[Message]) -> None:
        """Start from ``stored``, the session's transcript."""
        self._steps = Steps(self.steps.session, stored, steers=self._steers)
        self.history = history(stored)
        # Pydantic AI starts a run from a cleaned copy of its history (adjacent requests merged,
        # a trailing request re-sent as a new one), keeping the parts: what holds only these
        # parts is stored already. After the first step, the last message stored marks the place.
        self._stored_parts = [p for m in self.history for p in m.parts]
        self._loaded = True

    def __repr__(self) -> str:
        return f"Steering({self._steps if self._steps is not None else self._store!r})"

    @classmethod
    async def load(
        cls, session: Session, *, steers: int = 16, prompt_id: str | None = None
    ) -> Steering:
        """A :class:`Steering` for the next run on ``session``, from its stored transcript."""
        return cls(session, await session.messages(), steers=steers, prompt_id=prompt_id)

    @property
    def taken(self) -> list[Message]:
        """The steered messages this run took, in order (none for an Agent's Steering)."""
        return [] if self._steps is None else self._steps.taken

    def get_ordering(self) -> CapabilityOrdering:
        """Innermost: the request is complete by the time this capability sees it."""
        return CapabilityOrdering(position="innermost")

    @classmethod
    def get_serialization_name(cls) -> str | None:
        """None: bound to a live store, it cannot be built from an agent spec."""
        return None

    async def for_run(self, ctx: RunContext[Any]) -> AbstractCapability[Any]:
        """An Agent's Steering: a Steering of the run's own, on its ``conversation_id``."""
        if self._store is None:
            return self
        if serving.get() is ctx.agent:
            return _Idle()  # a service turn runs its own Steering, on the turn's fenced session
        if ctx.conversation_id is None:  # a run always has one; a context built by hand may not
            raise UsageError("an Agent's Steering steers the run's conversation_id: it has none")
        return Steering(Session(ctx.conversation_id, self._store), steers=self._steers)

    async def before_run(self, ctx: RunContext[Any]) -> None:
        """Refuse a second run and a second Steering in a run; read the stored transcript if
        no one did, and start a run given no history from it."""
        if self._started or self._steps is None:
            raise UsageError("a Steering serves one run; make a new one (Steering.load) per run")
        self._started = True
        if ctx.run_id is not None and _runs.setdefault(ctx.run_id, self) is not self:
            raise UsageError(
                "a run has one Steering: this one has two (the Agent's and the run's, say)"
            )
        if not self._loaded:
            self._begin(await self.steps.session.messages())
        if not ctx.messages and self.history:
            ctx.messages[:] = self.history  # the list the run starts from, read after this hook

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """The step: store what the run added, take the steers, enqueue them for this request."""
        self._messages = ctx.messages
        new, anchor = self._new(ctx.messages)
        taken = await self.steps.step(new)
        self._mark_stored(new, anchor)
        for message in taken:
            ctx.enqueue(steer_request(message), priority="asap")
        return request_context

    async def after_run(
        self, ctx: RunContext[Any], *, result: AgentRunResult[Any]
    ) -> AgentRunResult[Any]:
        """Store the rest of the run (its final answer), taking no steer."""
        await self._save_rest(result.all_messages())
        if ctx.run_id is not None and ctx.conversation_id == self.steps.session.id:
            _remember(ctx.run_id, self.steps.session.id, revision(self.steps.stored))
        return result

    async def wrap_run(
        self, ctx: RunContext[Any], *, handler: WrapRunHandler
    ) -> AgentRunResult[Any]:
        """Store what the run did when a usage limit ends it (a stop or an error stores nothing).

        A tool-call limit strikes after the model asked for the calls and before they ran:
        those calls are stored with the returns Pydantic AI's own repair gives a call that
        never ran (``repair_messages``), as every later run would be sent them anyway.
        """
        try:
            with journal_session(self.steps.session):  # the run's journaled tools' journal
                return await handler()
        except UsageLimitExceeded:
            if self._messages is not None:
                await self._save_rest(self._messages, repair=True)
            raise

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: ValidatedToolArgs,
        handler: WrapToolExecuteHandler,
    ) -> Any:
        """Hand a :func:`~steerable.integrations.pydantic_ai.journaled` tool its call (the
        model's call id) and the way to store the reply that made it before the call begins
        (which gives the stored reply's id)."""

        async def store_reply() -> str:
            await self._store_reply(ctx.messages)
            return self._reply_id(call.tool_call_id)

        token = running.set(Running(call, store_reply))
        try:
            with journal_session(self.steps.session):
                return await handler(args)
        finally:
            running.reset(token)

    def _reply_id(self, call_id: str) -> str:
        """The id of the stored reply whose call ``call_id`` runs now: the last reply stored.

        The run's history ends with that reply while its calls run, and it is stored before
        the first of them begins (by this run, or by the run a retry carries on), so it is
        the same stored message, under the same id, on every run of the call. An earlier
        reply that made a call under the same id (a model that numbers each reply's calls
        from ``call_0``) is another message, so that call has another key.
        """
        replies = [m for m in self.steps.stored if m.role == "assistant"]
        if replies and any(c.id == call_id for c in replies[-1].tool_calls):
            return replies[-1].id
        raise UsageError(
            f"the tool call {call_id!r} runs, but the last reply stored did not make it: "
            "its journal key is unknown"
        )

    async def _store_reply(self, messages: list[ModelMessage]) -> None:
        """Store what the run added up to the reply whose calls run now (the history ends with
        it while they run), unless it is stored: a resumed call, or another call of it."""
        async with self._reply:
            new, anchor = self._new(messages)
            if new:
                await self.steps.save(new)
                self._mark_stored(new, anchor)

    async def _save_rest(self, messages: list[ModelMessage], *, repair: bool = False) -> None:
        new, anchor = self._new(messages, repair=repair)
        await self.steps.save(new)
        self._mark_stored(new, anchor)

    def _mark_stored(self, new: list[Message], anchor: ModelMessage | None) -> None:
        # only once the store holds them: a failed step is redone whole by the next one
        self._anchor = anchor
        if new:
            self._prompt_open = False

    def _new(
        self, messages: list[ModelMessage], *, repair: bool = False
    ) -> tuple[list[Message], ModelMessage | None]:
        """The records of what ``messages`` has after the last message stored, and its new end
        (``repair``: that tail as Pydantic AI's repair sends it; it starts after a request)."""
        if self._anchor is None:
            start = _after_history(messages, self._stored_parts, self.history)
        else:
            start = _index(messages, self._anchor) + 1
        tail = messages[start:]
        if repair and tail:
            tail = repair_messages(tail)
        taken = {m.id for m in self.steps.taken}
        new: list[Message] = []
        for message in tail:
            if steer_id(message) in taken:
                continue  # stored already, by the take, as the steerable message it carries
            prompt = self._prompt_open and not new and _holds_user_prompt(message)
            new.append(record(message, id=self._prompt_id if prompt else None, prompt=prompt))
        return new, (messages[-1] if messages else self._anchor)


class _Idle(AbstractCapability[Any]):
    """What an Agent's Steering is in a run that a service turn steers itself."""


serving: ContextVar[object] = ContextVar("steerable_pydantic_ai_served", default=None)
"""The agent a service turn runs now, with a Steering of the turn's own."""

_runs: WeakValueDictionary[str, Steering] = WeakValueDictionary()

stored_runs: OrderedDict[str, tuple[str, str]] = OrderedDict()
"""The last runs a Steering stored whole, by run id: their session and the revision they left,
so that a ConversationStore save of one adds nothing (the newest 1024)."""


def _remember(run_id: str, session: str, stored: str) -> None:
    stored_runs[run_id] = (session, stored)
    stored_runs.move_to_end(run_id)
    while len(stored_runs) > 1024:
        stored_runs.popitem(last=False)


"""Each run's Steering, by run id: a run steered twice would store everything twice."""


def _after_history(
    messages: list[ModelMessage], parts: list[Any], stored: list[ModelMessage]
) -> int:
    """Where the run's own messages start: after the last message made of stored parts.

    The parts themselves (Pydantic AI merges and copies messages, not parts), or equal ones
    (a history processor that copies them); a run that holds none of a stored history has
    rewritten it, and storing it all again would be a lie.
    """
    ids = {id(p) for p in parts}
    for equal in (False, True):
        for index in range(len(messages) - 1, -1, -1):
            found = messages[index].parts
            if found and all((p in parts) if equal else (id(p) in ids) for p in found):
                return index + 1
    if stored:
        raise UsageError(
            "the run does not start from the stored transcript: pass `steering.history` as its "
            "`message_history` (or a history processor rewrote every stored message)"
        )
    return 0


def _index(messages: list[ModelMessage], anchor: ModelMessage) -> int:
    """Where the last message stored is in the run's history: itself, or an equal copy."""
    for equal in (False, True):
        for index in range(len(messages) - 1, -1, -1):
            if (messages[index] == anchor) if equal else (messages[index] is anchor):
                return index
    raise UsageError(
        "the run's history no longer holds the last message stored (a history processor or "
        "compaction removed or rewrote it): steering cannot keep the stored transcript in "
        "place; keep the last request and all after it as they are (trim older messages only)"
    )


def _holds_user_prompt(message: ModelMessage) -> bool:
    return isinstance(message, ModelRequest) and any(
        isinstance(p, UserPromptPart) for p in message.parts
    )
