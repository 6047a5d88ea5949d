"""Tools: typed Python functions the model can call.

:func:`tool` turns a function (sync or async) into a :class:`Tool` whose JSON schema comes
from the signature; a parameter's description comes from ``Annotated[T, Field(...)]``, the
tool's from the first paragraph of the docstring. The model's arguments are validated
against the signature before the function runs.

Nothing a tool does fails the run. A tool that raises, times out, is not known, or gets
arguments that are not valid JSON (or do not fit its signature) gives the model an error
result that says so, and the run goes on. Only the tool's own deadline (its ``timeout``,
else the spec's ``tool_timeout``) is reported as a timeout: a ``TimeoutError`` the tool
raises itself is its error like any other, with its message. Cancellation is never
turned into a result.

A sync function runs in a worker thread, so a slow one does not hold up the other calls
of the same reply, which run concurrently.

A run that dies mid-step redoes that step, so a plain tool can run twice for one call.
Mark a tool with side effects ``@tool(side_effects=True)`` (and, if running it twice is
harmless, ``idempotent=True``): with a session, its calls are journaled
(:mod:`steerable.journal`) and a finished call never runs again. A parameter annotated
:class:`~steerable.journal.ToolContext` is not shown to the model: the run fills it with
the call and its idempotency key.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, cast, get_type_hints, overload

import pydantic
import pydantic_core

from steerable.errors import UsageError
from steerable.journal import ToolContext, call_key
from steerable.messages import ToolCall, ToolResult
from steerable.models.base import ToolSpec

ToolFunction = Callable[..., Any]


@dataclass(frozen=True, slots=True, eq=False)
class Tool:
    """A function the model can call. Build one with :func:`tool`.

    ``side_effects``: its calls are journaled when the run has a session (a finished call
    is never run again); ``idempotent``: a journaled call interrupted mid-way may be run
    again (else the model is told its outcome is unknown).
    """

    name: str
    description: str
    parameters: dict[str, Any]
    function: ToolFunction
    timeout: float | None = None
    side_effects: bool = False
    idempotent: bool = False
    _arguments: type[pydantic.BaseModel] = field(repr=False, default=pydantic.BaseModel)
    _is_async: bool = field(repr=False, default=False)
    _context: str | None = field(repr=False, default=None)  # the ToolContext parameter

    @property
    def spec(self) -> ToolSpec:
        """What the model is told about this tool."""
        return ToolSpec(self.name, self.description, self.parameters)

    async def run(
        self,
        call: ToolCall,
        *,
        default_timeout: float | None = None,
        context: ToolContext | None = None,
    ) -> ToolResult:
        """Run the tool for ``call``; any failure becomes an error result.

        ``default_timeout`` applies when the tool has no timeout of its own; ``context``
        fills a :class:`ToolContext` parameter (one without a session is made if None).
        """
        limit = self.timeout if self.timeout is not None else default_timeout
        try:
            arguments = self._validate(call.arguments)
        except _BadArguments as exc:
            return ToolResult(call.id, call.name, str(exc), is_error=True)
        if self._context is not None:
            arguments[self._context] = context or ToolContext(call, call_key(None, "", call.id))
        deadline = asyncio.timeout(limit)
        try:
            async with deadline:
                value = await self._invoke(arguments)
        except Exception as exc:  # a tool's failure is the model's to read, not the run's
            # Only this deadline is a timeout; a TimeoutError the tool raised itself (its
            # own network call timed out) is its error, with its message.
            if isinstance(exc, TimeoutError) and deadline.expired():
                text = f"the tool timed out after {limit:g} s"
            else:
                text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            return ToolResult(call.id, call.name, text, is_error=True)
        return ToolResult(call.id, call.name, _as_text(value))

    def _validate(self, raw: str) -> dict[str, Any]:
        try:
            json.loads(raw or "{}")
        except ValueError as exc:
            raise _BadArguments(
                f"the arguments are not valid JSON ({exc}): {raw[:200]!r}"
            ) from None
        try:
            model = self._arguments.model_validate_json(raw or "{}")
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
                for e in exc.errors(include_url=False)
            )
            raise _BadArguments(f"invalid arguments for {self.name}: {problems}") from None
        return {name: getattr(model, name) for name in type(model).model_fields}

    async def _invoke(self, arguments: dict[str, Any]) -> Any:
        if self._is_async:
            return await cast(Awaitable[Any], self.function(**arguments))
        return await asyncio.to_thread(self.function, **arguments)


class _BadArguments(Exception):
    pass


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return pydantic_core.to_json(value, fallback=str).decode()


def _description(function: ToolFunction) -> str:
    doc = inspect.getdoc(function) or ""
    return doc.split("\n\n", 1)[0].strip()


def _hints(function: ToolFunction, name: str) -> dict[str, Any]:
    try:
        return get_type_hints(function, include_extras=True)
    except Exception as exc:
        raise UsageError(f"tool {name!r}: cannot read its type hints: {exc}") from exc


def _context_parameter(function: ToolFunction, name: str) -> str | None:
    """The parameter annotated :class:`ToolContext`, if the function has one (at most one)."""
    found = [p for p, hint in _hints(function, name).items() if hint is ToolContext]
    if len(found) > 1:
        raise UsageError(f"tool {name!r}: one ToolContext parameter at most, not {found}")
    return found[0] if found else None


def _arguments_model(function: ToolFunction, name: str) -> type[pydantic.BaseModel]:
    hints = _hints(function, name)
    fields: dict[str, Any] = {}
    for param in inspect.signature(function).parameters.values():
        if hints.get(param.name) is ToolContext:
            continue  # filled by the run, never described to the model
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise UsageError(f"tool {name!r}: *args and **kwargs cannot be described to a model")
        if param.kind is param.POSITIONAL_ONLY:
            raise UsageError(f"tool {name!r}: positional-only parameters are not supported")
        annotation = hints.get(param.name, Any)
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (annotation, default)
    config = pydantic.ConfigDict(extra="forbid", arbitrary_types_allowed=False)
    try:
        return pydantic.create_model(f"{name}_arguments", __config__=config, **fields)
    except Exception as exc:
        raise UsageError(f"tool {name!r}: its parameters cannot be described: {exc}") from exc


def _schema(model: type[pydantic.BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        if isinstance(prop, dict):
            prop.pop("title", None)
    return schema


@overload
def tool(function: ToolFunction, /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    side_effects: bool = False,
    idempotent: bool = False,
) -> Callable[[ToolFunction], Tool]: ...


def tool(
    function: ToolFunction | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    side_effects: bool = False,
    idempotent: bool = False,
) -> Tool | Callable[[ToolFunction], Tool]:
    """Make a :class:`Tool` of a function: ``@tool``, ``@tool(timeout=5)``, or
    ``@tool(side_effects=True)`` for one whose calls the journal must not repeat."""
    if not isinstance(side_effects, bool) or not isinstance(idempotent, bool):
        raise UsageError("side_effects and idempotent are True or False")

    def build(fn: object) -> Tool:
        if isinstance(fn, Tool):
            return fn
        if not callable(fn):
            raise UsageError(f"a tool is a function, not {type(fn).__name__}")
        tool_name: str = name if name is not None else str(getattr(fn, "__name__", ""))
        if not tool_name.isidentifier():
            raise UsageError(f"a tool needs a name that is an identifier, not {tool_name!r}")
        model = _arguments_model(fn, tool_name)
        return Tool(
            name=tool_name,
            description=description if description is not None else _description(fn),
            parameters=_schema(model),
            function=fn,
            timeout=timeout,
            side_effects=side_effects,
            idempotent=idempotent,
            _arguments=model,
            _is_async=inspect.iscoroutinefunction(fn),
            _context=_context_parameter(fn, tool_name),
        )

    return build(function) if function is not None else build


def as_tools(items: Any) -> tuple[Tool, ...]:
    """Tools from a sequence of tools and plain functions; names must be unique."""
    tools = tuple(tool(i) for i in items)
    names = [t.name for t in tools]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise UsageError(f"two tools share the names {duplicates}")
    return tools
