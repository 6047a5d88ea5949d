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

The place in the run's history where the store ends is followed by identity, then by
equality (a history processor that copies messages); a run that no longer holds it (a
processor that dropped or rewrote it, a run not given the stored history) is a
:class:`~steerable.UsageError` before anything is stored out of place or twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability, CapabilityOrdering, WrapRunHandler
from pydantic_ai.exceptions import UsageLimitExceeded
from pydantic_ai.messages import ModelMessage, ModelRequest, UserPromptPart, repair_messages
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.run import AgentRunResult

from steerable.errors import UsageError
from steerable.integrations._steps import Steps
from steerable.integrations.pydantic_ai._records import history, record, steer_id, steer_request
from steerable.messages import Message
from steerable.session import Session


class Steering(AbstractCapability[Any]):
    """Steers of ``session`` taken at each model request of one run, the run stored at each.

    ``stored`` is the session's transcript (what :meth:`load` reads); pass :attr:`history`
    as the run's ``message_history``. Without ``stored`` the session must be new (the run
    checks as it starts: a stored session is a :class:`~steerable.UsageError`). ``steers``
    caps the steers the run takes; ``prompt_id`` is the id to store the run's prompt under
    (a new one by default). One instance serves one run::

        steering = await Steering.load(session)
        result = await agent.run("hi", message_history=steering.history,
                                 capabilities=[steering])
    """

    def __init__(
        self,
        session: Session,
        stored: Sequence[Message] | None = None,
        *,
        steers: int = 16,
        prompt_id: str | None = None,
    ) -> None:
        if not isinstance(session, Session):
            raise UsageError(f"Steering takes a steerable Session, not {type(session).__name__}")
        self._unread = stored is None  # the run checks that the session is new
        stored = () if stored is None else stored
        self.steps = Steps(session, stored, steers=steers)
        self.history: list[ModelMessage] = history(stored)
        """The Pydantic AI history of ``stored``: the run's ``message_history``."""
        # Pydantic AI starts a run from a cleaned copy of its history (adjacent requests merged,
        # a trailing request re-sent as a new one), keeping the parts: what holds only these
        # parts is stored already. After the first step, the last message stored marks the place.
        self._stored_parts = [p for m in self.history for p in m.parts]
        self._anchor: ModelMessage | None = None
        self._prompt_id = prompt_id
        self._prompt_open = True  # the run's first new request may still be its prompt
        self._started = False
        self._messages: list[ModelMessage] | None = None

    def __repr__(self) -> str:
        return f"Steering({self.steps!r})"

    @classmethod
    async def load(
        cls, session: Session, *, steers: int = 16, prompt_id: str | None = None
    ) -> Steering:
        """A :class:`Steering` for the next run on ``session``, from its stored transcript."""
        return cls(session, await session.messages(), steers=steers, prompt_id=prompt_id)

    @property
    def taken(self) -> list[Message]:
        """The steered messages this run took, in order."""
        return self.steps.taken

    def get_ordering(self) -> CapabilityOrdering:
        """Innermost: the request is complete by the time this capability sees it."""
        return CapabilityOrdering(position="innermost")

    @classmethod
    def get_serialization_name(cls) -> str | None:
        """None: bound to a live session, it cannot be built from an agent spec."""
        return None

    async def before_run(self, ctx: RunContext[Any]) -> None:
        """Refuse a second run: the instance tracks one run's place in the transcript."""
        if self._started:
            raise UsageError("a Steering serves one run; make a new one (Steering.load) per run")
        self._started = True
        if self._unread and await self.steps.session.messages():
            raise UsageError(
                f"session {self.steps.session.id!r} has a stored transcript, and this Steering"
                " was given none: use `await Steering.load(session)` and pass its `history`"
                " as the run's `message_history`"
            )

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
            return await handler()
        except UsageLimitExceeded:
            if self._messages is not None:
                await self._save_rest(self._messages, repair=True)
            raise

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
