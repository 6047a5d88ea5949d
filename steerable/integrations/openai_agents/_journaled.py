"""A function tool of the OpenAI Agents SDK, journaled: each call runs once, across crashes.

``@journaled`` goes under the SDK's ``@function_tool``::

    @function_tool
    @journaled  # or @journaled(idempotent=True)
    async def pay(amount: int, context: ToolContext) -> str:  # steerable.journal.ToolContext
        ...

The SDK builds the same schema as without it: the wrapper keeps the function's name,
docstring and parameters, and adds (or reuses) the SDK's own first parameter, a
``agents.tool_context.ToolContext``, which carries the model's call id (``tool_call_id``, the
id the SDK keeps in the items it persists). A parameter annotated
:class:`steerable.journal.ToolContext` is not in the schema: the wrapper hands it the call's
idempotency key (and ``retried``).

Each call goes through :func:`steerable.integrations._journal.run_once` with that id and the
id of the stored message holding the model's reply that made the call (``reply=``: models do
not all keep call ids unique across replies, some number each reply's calls from
``call_0``). Before it runs, that reply is stored (the session remembers the reply as the
model gives it, through :func:`journal_hooks`), so a process killed inside the tool leaves a
transcript ending with that reply, and the next run carries the same calls on
(:meth:`SteerableSession.step`), under the same stored reply's id, instead of asking the
model again.

The output is recorded as the SDK would send it: a ``str`` as it is; anything else as the
SDK converts it (a structured output, ``ToolOutputText``/``ToolOutputImage``/... or a list of
them, as the JSON of its content list; any other value as its ``str``). The tool returns the
recorded form every time (its first run too), so a replay and the first run give the model
the same output.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar, get_type_hints, overload

from agents import FunctionTool, ItemHelpers, RunContextWrapper, RunHooks
from agents.items import ModelResponse
from agents.tool_context import ToolContext as SDKToolContext
from openai.types.responses import ResponseFunctionToolCall

from steerable.errors import UsageError
from steerable.integrations._journal import current_session, run_once
from steerable.integrations.openai_agents._session import (
    SteerableSession,
    carried_reply,
    session_of,
)
from steerable.journal import UNKNOWN, ToolContext
from steerable.messages import ToolCall

__all__ = ["FRAMEWORK", "journal_hooks", "journaled"]

FRAMEWORK = "openai_agents"
"""The framework's name in a call's key (with the stored reply's id: see ``run_once``)."""

F = TypeVar("F", bound=Callable[..., Any])

# the content types of a structured tool output, as the SDK sends it
_STRUCTURED = frozenset({"input_text", "input_image", "input_file"})

# while a run is watched (:func:`noting_answers`): each journaled call the journal answered
# without running the tool, by call id, as (replayed, is_error)
_ANSWERED: ContextVar[dict[str, tuple[bool, bool]] | None] = ContextVar(
    "steerable_openai_agents_answered", default=None
)


@contextmanager
def noting_answers(answered: dict[str, tuple[bool, bool]]) -> Iterator[None]:
    """Inside the block (and the tasks started in it), each journaled call the journal
    answered without running the tool goes into ``answered``: its call id, as (replayed,
    is_error): a recorded result is replayed, an interrupted call's UNKNOWN is an error."""
    token = _ANSWERED.set(answered)
    try:
        yield
    finally:
        _ANSWERED.reset(token)


def _is_context(annotation: object) -> bool:
    origin = getattr(annotation, "__origin__", None) or annotation
    return origin is RunContextWrapper or origin is SDKToolContext


def recorded_text(call: ResponseFunctionToolCall, output: object) -> str:
    """``output`` as the journal records it: what the SDK would put in the call's output
    item (its content list, a structured output, as JSON)."""
    if isinstance(output, str):
        return output
    converted = ItemHelpers.tool_call_output_item(call, output)["output"]
    if isinstance(converted, str):
        return converted
    return json.dumps(converted, ensure_ascii=False)


def as_output(text: str) -> Any:
    """The tool's return value for a recorded ``text``: the content list of a structured
    output, else the text."""
    if text.startswith("[") and text.endswith("]"):
        try:
            value = json.loads(text)
        except ValueError:
            return text
        if (
            isinstance(value, list)
            and value
            and all(isinstance(v, dict) and v.get("type") in _STRUCTURED for v in value)
        ):
            return value
    return text


@overload
def journaled(fn: F, *, idempotent: bool = False) -> Callable[..., Awaitable[Any]]: ...


@overload
def journaled(
    fn: None = None, *, idempotent: bool = False
) -> Callable[[F], Callable[..., Awaitable[Any]]]: ...


def journaled(
    fn: F | None = None, *, idempotent: bool = False
) -> Callable[..., Awaitable[Any]] | Callable[[F], Callable[..., Awaitable[Any]]]:
    """Journal a tool function of the SDK (see the module): put it under ``@function_tool``.

    ``idempotent=True``: a call interrupted by a crash is run again (same key,
    ``retried=True``) rather than answered with :data:`steerable.journal.UNKNOWN`.
    """
    if fn is None:
        return lambda f: _wrap(f, idempotent)
    return _wrap(fn, idempotent)


def _wrap(fn: Callable[..., Any], idempotent: bool) -> Callable[..., Awaitable[Any]]:
    if isinstance(fn, FunctionTool):
        raise UsageError("@journaled goes under @function_tool: it wraps the tool's function")
    if not callable(fn) or not inspect.isroutine(fn):
        raise UsageError(f"@journaled wraps a function, not {fn!r}")
    hints = get_type_hints(fn, include_extras=True)
    signature = inspect.signature(fn)
    params = [
        p.replace(annotation=hints.get(p.name, p.annotation)) for p in signature.parameters.values()
    ]
    takes_sdk_context = bool(params) and _is_context(params[0].annotation)
    ours = [p.name for p in params if p.annotation is ToolContext]
    if len(ours) > 1:
        raise UsageError(f"{fn.__name__} has more than one steerable ToolContext parameter")
    shown = [p for p in params if p.name not in ours]
    if not takes_sdk_context:
        shown.insert(
            0,
            inspect.Parameter(
                "__steerable_ctx",
                inspect.Parameter.POSITIONAL_ONLY,
                annotation=SDKToolContext[Any],
            ),
        )
    is_async = inspect.iscoroutinefunction(fn)

    @functools.wraps(fn)
    async def tool(ctx: SDKToolContext[Any], *args: Any, **kwargs: Any) -> Any:
        call = ctx.tool_call or ResponseFunctionToolCall(
            arguments=ctx.tool_arguments,
            call_id=ctx.tool_call_id,
            name=ctx.tool_name,
            type="function_call",
        )

        ran = False

        async def run(context: ToolContext) -> str:
            nonlocal ran
            ran = True
            given = dict(kwargs)
            if ours:
                given[ours[0]] = context
            front = (ctx,) if takes_sdk_context else ()
            if is_async:
                output = await fn(*front, *args, **given)
            else:  # as the SDK runs a sync tool: a worker thread, this context copied
                output = await asyncio.to_thread(fn, *front, *args, **given)
            return recorded_text(call, output)

        steering = session_of(ctx.run_config)
        session = current_session()
        if steering is not None:  # the reply is stored first; its message id is the key's
            reply = await steering.store_reply(ctx.tool_call_id)
            session = steering.session
        else:  # a call carried on (its reply stored before a crash), or no steered run
            reply = carried_reply(ctx.tool_call_id)
        text = await run_once(
            FRAMEWORK,
            ToolCall(ctx.tool_call_id, ctx.tool_name, ctx.tool_arguments),
            run,
            reply=reply,
            idempotent=idempotent,
            session=session,
        )
        answered = _ANSWERED.get()
        if answered is not None and not ran:  # the journal's answer: the tool did not run
            answered[ctx.tool_call_id] = (text != UNKNOWN, text == UNKNOWN)
        return as_output(text)

    annotations = {
        p.name: p.annotation for p in shown if p.annotation is not inspect.Parameter.empty
    }
    if signature.return_annotation is not inspect.Signature.empty:
        annotations["return"] = hints.get("return", signature.return_annotation)
    tool.__annotations__ = annotations
    tool.__signature__ = signature.replace(parameters=shown)  # type: ignore[attr-defined]
    del tool.__wrapped__  # the SDK reads this signature, not the function's
    tool.__steerable_journaled__ = True  # type: ignore[attr-defined]
    return tool


class _JournalHooks(RunHooks[Any]):
    """The run's hooks that tell ``session`` each model reply (see :func:`journal_hooks`)."""

    def __init__(self, session: SteerableSession, own: RunHooks[Any] | None) -> None:
        self.session = session
        self.own = own

    async def on_llm_start(self, context: Any, agent: Any, *args: Any, **kwargs: Any) -> None:
        if self.own is not None:
            await self.own.on_llm_start(context, agent, *args, **kwargs)

    async def on_llm_end(self, context: Any, agent: Any, response: ModelResponse) -> None:
        self.session._remember(response.to_input_items())
        if self.own is not None:
            await self.own.on_llm_end(context, agent, response)

    async def on_agent_start(self, context: Any, agent: Any) -> None:
        if self.own is not None:
            await self.own.on_agent_start(context, agent)

    async def on_agent_end(self, context: Any, agent: Any, output: Any) -> None:
        if self.own is not None:
            await self.own.on_agent_end(context, agent, output)

    async def on_handoff(self, context: Any, from_agent: Any, to_agent: Any) -> None:
        if self.own is not None:
            await self.own.on_handoff(context, from_agent, to_agent)

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        if self.own is not None:
            await self.own.on_tool_start(context, agent, tool)

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
        if self.own is not None:
            await self.own.on_tool_end(context, agent, tool, result)


def journal_hooks(session: SteerableSession, hooks: RunHooks[Any] | None = None) -> RunHooks[Any]:
    """The ``hooks=`` of a steered run with journaled tools: ``hooks`` (yours, if any), and
    each model reply handed to ``session`` (a :class:`SteerableSession`) as the model gives
    it, so a journaled call can store its reply before it runs."""
    if not isinstance(session, SteerableSession):
        raise UsageError(f"journal_hooks takes a SteerableSession, not {type(session).__name__}")
    return _JournalHooks(session, hooks)
