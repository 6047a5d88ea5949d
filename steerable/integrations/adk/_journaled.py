"""``journaled``: an ADK tool function whose each call runs once, across crashes and replicas.

The wrapper is what ADK's ``FunctionTool`` sees: the function's name, docstring and
parameters (so the same declaration goes to the model), plus ADK's own tool context
parameter, through which it learns the call's id (``tool_context.function_call_id``: the
model's id, or the one ADK gave a call that had none, kept in the function-call event that
was appended, and stored, before the tool ran). Each call then goes through
:func:`steerable.integrations._journal.run_once` under ``("adk", that id)`` and the id of
the stored message of the reply that made the call (``reply=``): models do not all make
call ids unique across replies (some number each reply's calls from ``call_0``), and a
later reply's call must not be answered with an earlier one's result. That message is the
session's last stored reply with function calls (it is stored before the tool runs), found
by :meth:`SteerableSessionService.stored_reply` with no I/O; a run carried on from the
stored transcript finds the same message. Over another ADK session service the reply is
the ADK event that holds the call (its id is kept wherever that service keeps events).

The journal is the steerable session that keeps the ADK session the tool runs in (its
:class:`SteerableSessionService`'s), else the session a run made current
(:func:`~steerable.integrations._journal.journal_session`: :class:`ADKAgent` does), else
there is none and the function just runs.

A function that declares a parameter of type :class:`steerable.journal.ToolContext` gets
one (the call, its idempotency key, the session, whether it is a retry); it is not in the
declaration the model sees. The output is recorded as JSON, as ADK would put it in the
function response; a replay returns that JSON decoded (a dict, a list, a str...: a
Pydantic model comes back as its dict), and a call whose outcome is unknown returns
``{"error": UNKNOWN}``, ADK's own error shape.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import typing
from collections import OrderedDict
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from contextvars import ContextVar
from typing import Any, Literal, TypeVar, overload

import pydantic_core
from google.adk.events.event import Event
from google.adk.tools.tool_context import ToolContext as AdkToolContext

from steerable.errors import UsageError
from steerable.integrations._journal import current_session, run_once
from steerable.journal import UNKNOWN, ToolContext
from steerable.messages import ToolCall
from steerable.session import Session

__all__ = ["JOURNALED", "journaled"]

F = TypeVar("F", bound=Callable[..., Any])

JOURNALED = "__steerable_journaled__"
"""The attribute a journaled function carries (its ``idempotent`` flag)."""

FRAMEWORK = "adk"
_ADK_CONTEXT = "tool_context"

Answered = Literal["replayed", "unknown"]
"""How the journal answered a call without running it: with the result an earlier run
recorded, or with UNKNOWN (it began before and its end is unknown)."""

_NOTED: ContextVar[MutableMapping[str, Answered] | None] = ContextVar(
    "steerable_adk_journal_noted", default=None
)


@contextlib.contextmanager
def noting_answers(noted: MutableMapping[str, Answered]) -> Iterator[None]:
    """While open, each journaled call the journal answers without running the tool is noted
    in ``noted`` under its call id (the live view tells a replayed result so)."""
    token = _NOTED.set(noted)
    try:
        yield
    finally:
        _NOTED.reset(token)


@overload
def journaled(fn: F, *, idempotent: bool = False) -> F: ...


@overload
def journaled(fn: None = None, *, idempotent: bool = False) -> Callable[[F], F]: ...


def journaled(fn: F | None = None, *, idempotent: bool = False) -> F | Callable[[F], F]:
    """Journal each call of the ADK tool function ``fn`` (bare, or with ``idempotent=``).

    A call whose result was recorded is not run again (the recorded output is returned);
    one that started and never ended is run again only when ``idempotent``, otherwise it
    returns ``{"error": UNKNOWN}`` without running. See :mod:`steerable.journal`.
    """
    if fn is None:
        return lambda f: _wrap(f, idempotent)
    return _wrap(fn, idempotent)


def _wrap(fn: F, idempotent: bool) -> F:
    if not callable(fn) or inspect.isclass(fn):
        raise UsageError(f"journaled wraps a tool function, not {fn!r}")
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        raise UsageError("journaled cannot wrap a generator tool (it has no one output)")
    signature = inspect.signature(fn)
    hints = _hints(fn)
    ours = [n for n in signature.parameters if _is(hints.get(n), ToolContext)]
    theirs = next((n for n in signature.parameters if _is(hints.get(n), AdkToolContext)), None)
    if theirs is None and _ADK_CONTEXT in signature.parameters and _ADK_CONTEXT not in ours:
        theirs = _ADK_CONTEXT  # ADK's fallback: a parameter named tool_context
    context_name = theirs or _free_name(signature)
    shown = [p for n, p in signature.parameters.items() if n not in ours]
    if theirs is None:
        shown.append(
            inspect.Parameter(
                context_name,
                inspect.Parameter.KEYWORD_ONLY,
                default=None,  # called by hand, outside ADK: the function just runs
                annotation=AdkToolContext,
            )
        )
        shown.sort(key=lambda p: p.kind)  # keyword-only after the others, **kwargs last
    name = getattr(fn, "__name__", type(fn).__name__)

    shown_signature = signature.replace(parameters=shown)

    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        given = shown_signature.bind(*args, **kwargs).arguments
        adk = given.get(context_name)
        adk = adk if isinstance(adk, AdkToolContext) else None
        call_id = adk.function_call_id if adk is not None else None
        arguments = {k: v for k, v in given.items() if k != context_name}
        ran = False

        async def run(context: ToolContext) -> str:
            nonlocal ran
            ran = True
            values = {**given, **dict.fromkeys(ours, context)}
            bound = inspect.BoundArguments(
                signature, OrderedDict((n, values[n]) for n in signature.parameters if n in values)
            )
            output = fn(*bound.args, **bound.kwargs)
            if inspect.isawaitable(output):
                output = await output
            return _encode(output)

        call = ToolCall(call_id or "", name, _encode(arguments))
        if adk is None or not call_id:  # no id to key the call by (ADK gives each one): just run
            return _decode(await run(ToolContext(call, "")))
        # with no session (none here, none made current) run_once just runs it
        session, reply = _journal_of(adk, call_id)
        text = await run_once(
            FRAMEWORK, call, run, reply=reply, idempotent=idempotent, session=session
        )
        noted = _NOTED.get()
        if not ran and noted is not None:
            noted[call_id] = "unknown" if text == UNKNOWN else "replayed"
        return _decode(text)

    functools.update_wrapper(wrapper, fn)
    wrapper.__signature__ = shown_signature  # type: ignore[attr-defined]
    annotations = {n: h for n, h in hints.items() if n not in ours}
    annotations[context_name] = AdkToolContext
    wrapper.__annotations__ = annotations
    setattr(wrapper, JOURNALED, idempotent)
    delattr(wrapper, "__wrapped__")  # ADK reads the signature above, and sees a coroutine
    return typing.cast(F, wrapper)


def is_journaled(func: object) -> bool:
    """Whether ``func`` is a :func:`journaled` tool function."""
    return hasattr(func, JOURNALED)


def _journal_of(adk: AdkToolContext, call_id: str) -> tuple[Session | None, str | None]:
    """The steerable session that journals call ``call_id``, and the id of the reply that
    made it: the stored message's, when the ADK session is a :class:`SteerableSessionService`'s
    (its session keeps the reply, stored before the tool runs); else the ADK event's, in
    whatever ADK's service keeps (None when the running session has no such reply)."""
    from steerable.integrations.adk._sessions import SteerableSessionService

    invocation = getattr(adk, "_invocation_context", None)
    service = getattr(invocation, "session_service", None)
    running = adk.session
    if isinstance(service, SteerableSessionService):
        session = service.session(
            app_name=running.app_name, user_id=running.user_id, session_id=running.id
        )
        return session, service.stored_reply(running, call_id)
    return current_session(), _reply_event(running.events, call_id)


def _reply_event(events: Sequence[Event], call_id: str) -> str | None:
    """The id of the last event of ``events`` with function calls, when ``call_id`` is
    among them."""
    for event in reversed(events):
        calls = event.get_function_calls()
        if calls:
            return event.id if any(call.id == call_id for call in calls) else None
    return None


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn)
    except Exception:  # an unresolvable forward reference: the annotations as written
        return dict(getattr(fn, "__annotations__", {}))


def _is(annotation: object, kind: type) -> bool:
    if annotation is kind:
        return True
    if isinstance(annotation, str):  # unresolved: by name, as ADK falls back to
        return annotation.rsplit(".", 1)[-1] == kind.__name__ and kind is not ToolContext
    return any(_is(arg, kind) for arg in typing.get_args(annotation))  # Optional[...]


def _free_name(signature: inspect.Signature) -> str:
    name = _ADK_CONTEXT
    while name in signature.parameters:
        name = "_" + name
    return name


def _encode(output: object) -> str:
    """``output`` as ADK puts it in a function response: JSON."""
    try:
        return pydantic_core.to_json(output).decode()
    except pydantic_core.PydanticSerializationError:
        return json.dumps(str(output))


def _decode(text: str) -> Any:
    """What the tool returns for a recorded (or just made) output."""
    if text == UNKNOWN:
        return {"error": UNKNOWN}
    return json.loads(text)
