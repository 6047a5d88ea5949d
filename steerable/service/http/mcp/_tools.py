"""The MCP tools: send, steer, stop, status, wait and transcript, each a verb of the service.

Each tool's arguments are a pydantic model (its ``inputSchema``) and its answer one of the
HTTP API's own models (its ``outputSchema``): the same words over both doors. A tool call
that fails (a bad argument, an unknown session, a full queue) is a result with ``isError``
and one line, as MCP asks of tool errors, never a protocol error.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, CallToolResult, TextContent, Tool
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request

from steerable.errors import SteerableError
from steerable.service._service import MAX_ID, MAX_PAGE
from steerable.service.http import _bodies as b
from steerable.service.http import _models as m
from steerable.service.http._context import MAX_WAIT, Context
from steerable.service.http._problems import ProblemError

__all__ = ["TOOLS", "call_tool", "tools"]

SessionField = Annotated[
    str, Field(min_length=1, max_length=MAX_ID, description="the session's id (yours to pick)")
]
Seconds = Annotated[float, Field(gt=0, le=MAX_WAIT, allow_inf_nan=False)]


class SendArgs(b.SendBody):
    """Send a message: a turn of its own, started now or queued behind the running one."""

    session: SessionField


class SteerArgs(b.SteerBody):
    """Steer the session's running turn: its next step takes the text, exactly once; if
    the turn ends first, the text is a turn of its own. ``wait``: seconds to wait for
    that fate."""

    session: SessionField
    wait: Annotated[float, Field(ge=0, le=MAX_WAIT, allow_inf_nan=False)] = 0


class SessionArgs(BaseModel):
    """A session."""

    model_config = ConfigDict(extra="forbid")
    session: SessionField


class WaitArgs(SessionArgs):
    """Wait up to ``seconds`` for the turn ``turn`` to end; its state and answer."""

    turn: Annotated[str, Field(min_length=1, max_length=MAX_ID, description="the turn's id")]
    seconds: Seconds = 30.0


class TranscriptArgs(SessionArgs):
    """The session's messages after position ``after``, up to ``limit``."""

    after: Annotated[int, Field(ge=-1, lt=2**62)] = -1
    limit: Annotated[int, Field(ge=1, le=MAX_PAGE)] = 100


Handler = Callable[[Context, Request, Any], Awaitable[BaseModel]]


@dataclass(frozen=True, slots=True)
class _Verb:
    arguments: type[BaseModel]
    answer: type[BaseModel]
    handler: Handler
    description: str


async def _send(context: Context, request: Request, args: SendArgs) -> m.Sent:
    body = b.SendBody(text=args.text, id=args.id, metadata=args.metadata, if_idle=args.if_idle)
    _, accepted = await context.accept(request, args.session, body, None)
    state: Literal["started", "queued"] = "started" if accepted.ahead == 0 else "queued"
    return m.Sent(id=accepted.id, turn=accepted.id, state=state, ahead=accepted.ahead)


async def _steer(context: Context, request: Request, args: SteerArgs) -> m.Steered:
    body = b.SteerBody(
        text=args.text, id=args.id, metadata=args.metadata, expected_turn=args.expected_turn
    )
    session, accepted = await context.accept(request, args.session, body, None)
    fate = None
    if args.wait > 0:
        view = await context.service.fate(session, accepted.id, seconds=args.wait)
        fate = None if view is None else m.fate_out(view)
    return m.Steered(id=accepted.id, turn=accepted.turn, fate=fate)


async def _stop(context: Context, request: Request, args: SessionArgs) -> m.Stopped:
    session = context.session(request, args.session)
    turn = await context.service.stop(session)
    if turn is None:
        await context.known(session)
    return m.Stopped(turn=turn)


async def _status(context: Context, request: Request, args: SessionArgs) -> m.StatusOut:
    session = context.session(request, args.session)
    now = await context.service.status(session, limit=20)
    if now.turn is None and not now.waiting_total and not now.metadata:
        await context.known(session)
    return m.status_out(args.session, now, [m.input_out(v) for v in now.waiting])


async def _wait(context: Context, request: Request, args: WaitArgs) -> m.TurnOut:
    session = context.session(request, args.session)
    view = await context.service.wait(session, args.turn, seconds=args.seconds)
    if view is None:
        raise ProblemError(404, "turn_not_found", "no such turn in this session")
    return m.turn_out(view, output=True)


async def _transcript(context: Context, request: Request, args: TranscriptArgs) -> m.TranscriptPage:
    session = context.session(request, args.session)
    entries = await context.service.transcript(session, after=args.after, limit=args.limit)
    if not entries:
        await context.known(session)
    out = [m.message_out(e) for e in entries]
    more = len(entries) == args.limit
    return m.TranscriptPage(messages=out, next=out[-1].position if more else None)


TOOLS: dict[str, _Verb] = {
    "send": _Verb(SendArgs, m.Sent, _send, "Send a message to a session: a turn of its own."),
    "steer": _Verb(
        SteerArgs,
        m.Steered,
        _steer,
        "Steer the session's running turn: taken at its next step, exactly once, or a turn"
        " of its own if the turn ends first (fate tells which).",
    ),
    "stop": _Verb(SessionArgs, m.Stopped, _stop, "Stop the session's running turn."),
    "status": _Verb(
        SessionArgs, m.StatusOut, _status, "The session's running turn and waiting inputs."
    ),
    "wait": _Verb(WaitArgs, m.TurnOut, _wait, "Wait for a turn to end: its state and answer."),
    "transcript": _Verb(
        TranscriptArgs, m.TranscriptPage, _transcript, "The session's messages, in order."
    ),
}
"""Each tool's name, arguments, answer and handler."""


def tools() -> list[Tool]:
    """The tools, as ``tools/list`` answers them."""
    return [
        Tool(
            name=name,
            description=verb.description,
            input_schema=verb.arguments.model_json_schema(),
            output_schema=verb.answer.model_json_schema(),
        )
        for name, verb in TOOLS.items()
    ]


def _failed(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


async def call_tool(
    context: Context, request: Request, name: str, arguments: dict[str, Any] | None
) -> CallToolResult:
    """Run the tool ``name`` for the tenant of ``request``; a failure is an ``isError``."""
    verb = TOOLS.get(name)
    if verb is None:  # the spec: not finding the tool is a protocol error, not a result
        raise MCPError(INVALID_PARAMS, f"no tool named {name!r} (there are: {', '.join(TOOLS)})")
    try:
        args = verb.arguments.model_validate(arguments or {})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "arguments"
        return _failed(f"invalid_request: {where}: {first['msg']}")
    try:
        answer = await verb.handler(context, request, args)
    except ProblemError as exc:
        return _failed(f"{exc.code}: {exc.detail}")
    except SteerableError as exc:
        return _failed(f"{type(exc).__name__}: {exc}")
    data = answer.model_dump(mode="json")
    text = answer.model_dump_json()
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=data, is_error=False
    )
