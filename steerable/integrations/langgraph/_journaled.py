"""A LangGraph tool function, journaled: :func:`journaled`.

A user of LangGraph writes a tool as a function (under ``@tool``, or given as is to
``create_agent``), and LangGraph's ``ToolNode`` calls it with the model's call. The call's
id is the model's (``AIMessage.tool_calls[i]["id"]``), kept in the reply that LangGraph's
history holds: :class:`SteeringMiddleware` stores a reply with journaled calls before the
calls run, and a checkpointer stores it with the model step's checkpoint, so a resumed run
calls the tool again under the same id. The function learns the id the way langchain hands
it to any tool: a parameter annotated ``InjectedToolCallId``, which ``BaseTool`` fills from
the call and leaves out of the schema the model sees. :func:`journaled` adds one (or uses
the function's own), so ``@tool`` builds the same schema and description as for the
function alone.

Models do not all make call ids unique in a session (some servers number each reply's
calls from ``call_0``), so a call is journaled under the id of the reply that made it too:
the id of the stored message holding that ``AIMessage``, which keeps the langchain
message's own id (:func:`~steerable.integrations.langgraph.to_stored`) and reads back under
it. The function finds the reply in the graph's state, which LangGraph hands any tool in a
``ToolRuntime``: :func:`journaled` adds a parameter for it too (or uses the function's own).
A run carried on (from the checkpoint, or from the stored transcript on a takeover or a
retry) has the stored reply in its state, under the same id, so its calls keep their keys.

The journal is the session the run stores into (:func:`~steerable.integrations._journal.
current_session`: :class:`SteeringMiddleware` sets it around each tool call, and
:class:`LangGraphAgent` around its turn), else, for a graph checkpointed by a
:class:`SteerableSaver`, the session of the run's thread in the saver's store (the one its
checkpoints are in); else the tool just runs.

A watcher of the call (:class:`SteeringMiddleware` when the turn has a live sink) sets a
:class:`CallWatch` around it (:func:`watching`): the wrapper awaits its ``running`` just
before the function runs, and marks it ``replayed`` when the journal gave back a recorded
output instead (the function did not run).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import typing
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Annotated, Any, overload

from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import BaseTool, InjectedToolArg, InjectedToolCallId
from langgraph.config import get_config
from langgraph.prebuilt import ToolRuntime
from langgraph.types import Command

from steerable.errors import UsageError
from steerable.integrations._journal import current_session, run_once
from steerable.integrations.langgraph._records import FRAMEWORK
from steerable.journal import UNKNOWN, ToolContext, call_key
from steerable.messages import ToolCall
from steerable.session import Session
from steerable.store import check_session_id

__all__ = ["JOURNALED", "CallWatch", "journaled", "watching"]

CALL_ID = "steerable_call_id"
"""The parameter :func:`journaled` adds to learn the call's id (unless the function has one
annotated ``InjectedToolCallId`` already): injected by langchain, unseen by the model."""

RUNTIME = "steerable_runtime"
"""The parameter :func:`journaled` adds to see the graph's state (unless the function has a
``ToolRuntime`` one already): injected by LangGraph's ``ToolNode``, unseen by the model."""

JOURNALED = "__steerable_journaled__"
"""The attribute that marks a journaled function (its value: whether it is idempotent)."""

# The key LangGraph's run config holds the graph's checkpointer under (langgraph's
# _internal._constants.CONFIG_KEY_CHECKPOINTER; tested, so a rename is seen).
_CHECKPOINTER = "__pregel_checkpointer"

Journaled = Callable[..., Coroutine[Any, Any, Any]]


@dataclass(slots=True)
class CallWatch:
    """What a watcher of the call ``call_id`` learns from a journaled tool: ``running`` is
    awaited just before the function runs; ``replayed`` is set when the journal answered
    with a recorded output (and the function did not run)."""

    call_id: str
    running: Callable[[], Awaitable[None]]
    replayed: bool = False


_WATCH: ContextVar[CallWatch | None] = ContextVar("steerable_langgraph_watch", default=None)


@contextmanager
def watching(watch: CallWatch) -> Iterator[None]:
    """Make ``watch`` the watcher of its call for the journaled tools run in the block."""
    token = _WATCH.set(watch)
    try:
        yield
    finally:
        _WATCH.reset(token)


@overload
def journaled(fn: Callable[..., Any], /, *, idempotent: bool = False) -> Journaled: ...


@overload
def journaled(
    fn: None = None, /, *, idempotent: bool = False
) -> Callable[[Callable[..., Any]], Journaled]: ...


def journaled(
    fn: Callable[..., Any] | None = None, /, *, idempotent: bool = False
) -> Journaled | Callable[[Callable[..., Any]], Journaled]:
    """Journal each call of the tool function ``fn``: run once per call, across crashes.

    Use it under ``@tool`` (or on a function given to ``create_agent``), bare or with
    ``idempotent=True`` (an interrupted call is run again, under the same key, rather than
    answered with :data:`steerable.journal.UNKNOWN`)::

        @tool
        @journaled
        async def pay(amount: int, context: ToolContext) -> str:
            \"\"\"Pay ``amount``.\"\"\"

    A parameter annotated :class:`~steerable.journal.ToolContext` gets the call, its
    idempotency key, the session and whether the call is a retry; the model never sees it.
    The result is the output as text (a ``str`` as it is, anything else as langchain would
    write it in the ToolMessage: its JSON, else its ``str``), recorded as the call ends and
    given back as it is on a replay. An interrupted call's UNKNOWN is an error ToolMessage.
    The wrapper is async (a sync function runs in a worker thread, the context copied):
    run the graph with ``ainvoke``/``astream``. A call is keyed by the session, the stored
    reply that made it (found in the graph's state) and the model's call id, so replies that
    reuse a call id (``call_0`` in each) are distinct calls.
    """
    if type(idempotent) is not bool:
        raise UsageError(f"idempotent is a bool, not {idempotent!r}")
    if fn is None:
        return functools.partial(_journaled, idempotent=idempotent)
    return _journaled(fn, idempotent=idempotent)


def is_journaled(tool: object) -> bool:
    """Whether ``tool`` (a langchain tool, or a function) calls a :func:`journaled` one."""
    if isinstance(tool, BaseTool):
        return any(
            getattr(f, JOURNALED, None) is not None
            for f in (getattr(tool, "coroutine", None), getattr(tool, "func", None))
        )
    return getattr(tool, JOURNALED, None) is not None


def _journaled(fn: Callable[..., Any], *, idempotent: bool) -> Journaled:
    if isinstance(fn, BaseTool):
        raise UsageError(
            "journaled wraps a tool's function: put @journaled under @tool, not over it"
        )
    if not callable(fn):
        raise UsageError(f"journaled wraps a function, not {fn!r}")
    name = getattr(fn, "__name__", type(fn).__name__)
    signature = inspect.signature(fn)
    hints = _hints(fn)
    params = [
        p.replace(annotation=hints.get(p.name, p.annotation)) for p in signature.parameters.values()
    ]
    contexts = [p.name for p in params if p.annotation is ToolContext]
    if len(contexts) > 1:
        raise UsageError(f"{name} has {len(contexts)} ToolContext parameters: one at most")
    context = contexts[0] if contexts else None
    ids = [p.name for p in params if _injected(p.annotation, InjectedToolCallId)]
    injected = {p.name for p in params if _injected(p.annotation, InjectedToolArg)}
    injected |= {p.name for p in params if _is_runtime(p.annotation)} | set(contexts)
    shown = [p for p in params if p.name != context]
    # LangGraph injects one ToolRuntime per tool (into a parameter typed, or named, so)
    runtimes = [p.name for p in shown if _is_runtime(p.annotation) or p.name == "runtime"]
    added: list[inspect.Parameter] = []
    call_id = ids[0] if ids else CALL_ID
    if not ids:
        added.append(_hidden(name, signature, CALL_ID, Annotated[str | None, InjectedToolCallId]))
    runtime = runtimes[-1] if runtimes else RUNTIME
    if not runtimes:
        added.append(
            _hidden(name, signature, RUNTIME, Annotated[ToolRuntime | None, InjectedToolArg])
        )
    at = next((i for i, p in enumerate(shown) if p.kind is p.VAR_KEYWORD), len(shown))
    shown[at:at] = added
    injected |= {p.name for p in added}
    outer = signature.replace(parameters=shown)
    inner = signature.replace(parameters=params)

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        given = outer.bind(*args, **kwargs)
        given.apply_defaults()
        arguments = dict(given.arguments)
        id = arguments.get(call_id)
        reply = _reply(arguments.get(runtime), id)
        for hidden in added:
            del arguments[hidden.name]
        shown_args = {k: v for k, v in arguments.items() if k not in injected and _jsonable(v)}
        call = ToolCall(id or "", name, json.dumps(shown_args, ensure_ascii=False, default=str))
        watch = _WATCH.get()
        if watch is not None and (id is None or watch.call_id != id):
            watch = None  # another call's watcher (this one runs inside that call)
        ran = False

        async def run(tool_context: ToolContext) -> str:
            nonlocal ran
            ran = True
            if watch is not None:
                await watch.running()
            values = dict(arguments)
            if context is not None:
                values[context] = tool_context
            bound = inspect.BoundArguments(
                inner, {p.name: values[p.name] for p in params if p.name in values}
            )
            if inspect.iscoroutinefunction(fn):
                output = await fn(*bound.args, **bound.kwargs)
            else:
                # to_thread copies the context: the journal's session rides along
                output = await asyncio.to_thread(fn, *bound.args, **bound.kwargs)
            return _text(name, output)

        if id is None:  # not called by LangGraph with a model's call: nothing to key
            return await run(ToolContext(call, call_key(None, FRAMEWORK, "")))
        output = await run_once(
            FRAMEWORK, call, run, reply=reply, idempotent=idempotent, session=_journal()
        )
        if output == UNKNOWN:
            return ToolMessage(UNKNOWN, tool_call_id=id, name=name, status="error")
        if watch is not None and not ran:
            watch.replayed = True
        return output

    del wrapper.__wrapped__  # the schema is the wrapper's signature, not the function's
    wrapper.__signature__ = outer  # type: ignore[attr-defined]
    wrapper.__annotations__ = {
        p.name: p.annotation for p in shown if p.annotation is not inspect.Parameter.empty
    }
    if signature.return_annotation is not inspect.Signature.empty:
        wrapper.__annotations__["return"] = hints.get("return", signature.return_annotation)
    setattr(wrapper, JOURNALED, idempotent)
    return wrapper


def _hidden(name: str, signature: inspect.Signature, param: str, kind: Any) -> inspect.Parameter:
    """The keyword parameter ``param`` that the wrapper adds, which langchain injects."""
    if param in signature.parameters:
        raise UsageError(f"{name} has a parameter {param!r}: rename it")
    return inspect.Parameter(param, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=kind)


def _reply(runtime: object, call_id: str | None) -> str | None:
    """The id of the reply that made call ``call_id``: the last ``AIMessage`` of the graph's
    state calling it (the stored message of that reply has its id). None outside a graph
    (the tool called by hand), where no state says which reply it was."""
    if call_id is None or not isinstance(runtime, ToolRuntime):
        return None
    state = runtime.state
    if isinstance(state, dict):
        messages = state.get("messages")
    else:
        messages = state if isinstance(state, list) else getattr(state, "messages", None)
    for message in reversed(list(messages or [])):
        if isinstance(message, AIMessage) and any(
            call.get("id") == call_id for call in message.tool_calls
        ):
            return message.id
    return None


def _journal() -> Session | None:
    """The session to journal into: the run's (a context variable), else the thread's of a
    :class:`SteerableSaver` checkpointing the graph, else None (the tool just runs)."""
    session = current_session()
    if session is not None:
        return session
    from steerable.integrations.langgraph._saver import SteerableSaver  # import cycle

    try:
        config = get_config()
    except RuntimeError:
        return None
    configurable = config.get("configurable") or {}
    saver = configurable.get(_CHECKPOINTER)
    thread = configurable.get("thread_id")
    if not isinstance(saver, SteerableSaver) or thread is None:
        return None
    return Session(check_session_id(saver.prefix + str(thread)), saver.store)


def _text(name: str, output: object) -> str:
    """The output as the ToolMessage's text, as langchain writes a non-text one."""
    if isinstance(output, str):
        return output
    if isinstance(output, ToolMessage | Command):
        raise UsageError(
            f"the journaled tool {name!r} returned a {type(output).__name__}: a journaled"
            " tool returns its output (text, or a value JSON can hold), which is recorded"
        )
    try:
        return json.dumps(output, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(output)


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except Exception:  # unresolvable names: the signature's annotations as written
        return {}


def _injected(annotation: object, kind: type[InjectedToolArg]) -> bool:
    """Whether ``annotation`` is ``Annotated[..., kind]`` (or ``kind()``)."""
    if typing.get_origin(annotation) is not Annotated:
        return False
    return any(
        isinstance(meta, kind) or (isinstance(meta, type) and issubclass(meta, kind))
        for meta in typing.get_args(annotation)[1:]
    )


def _is_runtime(annotation: object) -> bool:
    origin = typing.get_origin(annotation) or annotation
    return isinstance(origin, type) and issubclass(origin, ToolRuntime)


def _jsonable(value: object) -> bool:
    return isinstance(value, str | int | float | bool | list | dict | tuple) or value is None
