"""Pydantic AI tool functions, journaled: each call runs at most once, across crashes.

:func:`journaled` wraps a tool function as a Pydantic AI user writes it (for
``@agent.tool``, ``@agent.tool_plain``, ``Tool(...)`` or ``tools=[...]``) so that a call of it
goes through :func:`steerable.integrations._journal.run_once`, keyed by the session, the id
of the stored reply that made the call and the model's own call id
(``ToolCallPart.tool_call_id``, which Pydantic AI keeps in the history the run stores). The
reply's id is in the key because models do not all make call ids unique across replies (some
servers number each reply's calls from ``call_0``).

The call id comes from :class:`Steering`: its ``wrap_tool_execute`` hook hands the call being
run to the tool (a context variable, so a plain tool gets it too), together with a way to
store the reply that made the call, which the wrapper uses before the call begins, and to
find that stored reply's id (the same on the first run and on every run that carries the
call on, which reads it from the stored transcript). So a
process killed inside the tool leaves a transcript ending with that reply, and the retried
run (``agent.run(None, conversation_id=...)``, a takeover) carries the same call on rather than
asking the model again. A tool that takes a ``RunContext`` must be handed the call its
``ctx.tool_call_id`` names.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, overload

import pydantic_core
from pydantic_ai import RunContext
from pydantic_ai._utils import run_in_executor
from pydantic_ai.exceptions import ToolFailed
from pydantic_ai.messages import ToolCallPart, ToolReturnPart

from steerable.errors import UsageError
from steerable.integrations._journal import current_session, run_once
from steerable.journal import UNKNOWN, ToolContext, call_key
from steerable.messages import ToolCall

__all__ = ["FRAMEWORK", "journaled"]

FRAMEWORK = "pydantic_ai"
"""The framework's name in a journaled call's key."""

Journaled = Callable[..., Awaitable[Any]]
"""A journaled tool function: async, called as the function it wraps (less its ToolContext)."""


@dataclass(frozen=True, slots=True)
class Running:
    """The tool call :class:`Steering` runs now, and how to store the reply that made it."""

    call: ToolCallPart
    store_reply: Callable[[], Awaitable[str]]
    """Store the reply that made the call (unless it is stored); the stored reply's id."""


running: ContextVar[Running | None] = ContextVar("steerable_pydantic_ai_call", default=None)
"""Set by :class:`Steering` around each tool call it sees run."""

replays: ContextVar[set[str] | None] = ContextVar("steerable_pydantic_ai_replays", default=None)
"""Where a journaled tool notes the id of a call it answered from the journal (the tool did
not run now), when someone watches (a service turn's live view of its tool calls)."""


@overload
def journaled(fn: Callable[..., Any], /) -> Journaled: ...
@overload
def journaled(*, idempotent: bool = False) -> Callable[[Callable[..., Any]], Journaled]: ...
def journaled(
    fn: Callable[..., Any] | None = None, /, *, idempotent: bool = False
) -> Journaled | Callable[[Callable[..., Any]], Journaled]:
    """Journal each call of the Pydantic AI tool function ``fn`` in the run's session.

    Use it bare (``@journaled``) or with arguments (``@journaled(idempotent=True)``), under
    the framework's own decorator (``@agent.tool`` / ``@agent.tool_plain``) or on a function
    passed in ``tools=[...]``: the tool's name, docstring and schema stay the function's.

    In a run with :class:`~steerable.integrations.pydantic_ai.Steering` (every way this
    integration runs one), a call whose result the journal recorded is not run again (the
    recorded output is returned), a call that started and never ended runs again only if
    ``idempotent``, otherwise it fails with :data:`steerable.journal.UNKNOWN` (Pydantic AI's
    ``ToolFailed``: the model reads that its outcome is unknown). With no session the
    function just runs.

    A parameter annotated :class:`steerable.journal.ToolContext` (any name, any place) is not
    part of the tool's schema: it is given the call's context (``key``, the idempotency key
    to pass on; ``retried``). An output that is not a ``str`` is recorded as the JSON text
    Pydantic AI sends the model; a replay returns that text decoded from JSON (a dict, a
    list, a number), or the text itself when the function is annotated ``-> str``.
    """

    def decorate(function: Callable[..., Any]) -> Journaled:
        return _wrap(function, idempotent=idempotent)

    return decorate if fn is None else decorate(fn)


def _wrap(function: Callable[..., Any], *, idempotent: bool) -> Journaled:
    if not callable(function):
        raise UsageError(f"journaled wraps a tool function, not {type(function).__name__}")
    signature = inspect.signature(function)
    try:
        hints = typing.get_type_hints(function, include_extras=True)
    except (NameError, TypeError):  # an annotation naming what is not global: read it as written
        hints = {
            k: ToolContext if v in (ToolContext, "ToolContext") else str if v in (str, "str") else v
            for k, v in getattr(function, "__annotations__", {}).items()
        }
    context_names = [n for n in signature.parameters if hints.get(n) is ToolContext]
    text_out = hints.get("return") is str
    is_async = inspect.iscoroutinefunction(function)
    name = getattr(function, "__name__", "tool")

    async def call_function(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if is_async:
            return await function(*args, **kwargs)
        # a sync tool runs where Pydantic AI runs one: its executor (a worker thread, or the
        # `ThreadExecutor` capability's), the context copied
        value = await run_in_executor(functools.partial(function, *args, **kwargs))
        return await value if inspect.isawaitable(value) else value

    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        ctx = args[0] if args and isinstance(args[0], RunContext) else None
        now = running.get()
        if now is not None and ctx is not None and ctx.tool_call_id != now.call.tool_call_id:
            now = None  # another run's call (a run inside a tool): not this one
        session = current_session()
        if session is not None and now is None:
            raise UsageError(
                f"journaled tool {name!r} ran with a session but not through Steering's tool "
                "hook: its call id is unknown, so it cannot be journaled"
            )
        call = _call_of(now, ctx, name)
        produced: list[Any] = []

        async def run(context: ToolContext) -> str:
            given = dict.fromkeys(context_names, context)
            value = await call_function(args, {**kwargs, **given})
            produced.append(value)
            return _text(value, call)

        reply: str | None = None
        if now is not None and session is not None:
            # the reply that made the call, stored before the call begins: its id keys the call
            reply = await now.store_reply()
        output = await run_once(
            FRAMEWORK, call, run, reply=reply, idempotent=idempotent, session=session
        )
        if produced and output == _text(produced[0], call):
            return produced[0]  # this run made it: the tool's own value, as Pydantic AI expects
        if not produced and output == UNKNOWN:
            raise ToolFailed(UNKNOWN)
        watched = replays.get()
        if not produced and watched is not None:
            watched.add(call.id)  # the journal's recorded output: the tool did not run now
        return output if text_out else _decoded(output)

    functools.update_wrapper(wrapper, function)
    if context_names:
        wrapper.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[p for n, p in signature.parameters.items() if n not in context_names]
        )
        wrapper.__annotations__ = {
            k: v for k, v in function.__annotations__.items() if k not in context_names
        }
    return wrapper


def _call_of(now: Running | None, ctx: RunContext[Any] | None, name: str) -> ToolCall:
    """The call as steerable tells it: the model's call id, the tool's name, its arguments."""
    if now is not None:
        part = now.call
        return ToolCall(part.tool_call_id, part.tool_name, part.args_as_json_str())
    if ctx is not None and ctx.tool_call_id is not None:
        return ToolCall(ctx.tool_call_id, ctx.tool_name or name, "{}")
    return ToolCall("", name, "{}")  # called outside a run: nothing to key it by


def _text(value: Any, call: ToolCall) -> str:
    """What Pydantic AI sends the model for ``value`` as this call's return."""
    if isinstance(value, str):
        return value
    return ToolReturnPart(call.name, value, tool_call_id=call.id).model_response_str()


def _decoded(text: str) -> Any:
    """A recorded output as the value to return: its JSON decoded, else the text."""
    try:
        return pydantic_core.from_json(text)
    except ValueError:
        return text


def key_of(session: str | None, reply: str, call_id: str) -> str:
    """The idempotency key of the journaled call ``call_id`` that the stored message ``reply``
    made in ``session``."""
    return call_key(session, f"{FRAMEWORK}/{reply}", call_id)
