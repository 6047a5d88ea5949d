"""The routes of the HTTP API (DESIGN.md, "HTTP API"); docs/http.md is their reference."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import FastAPI, Header, Query, Request
from fastapi.responses import StreamingResponse

from steerable.service._service import MAX_ID, MAX_PAGE
from steerable.service.http import _bodies as b
from steerable.service.http import _models as m
from steerable.service.http._context import (
    MAX_AFTER,
    MAX_WAIT,
    Context,
    Id,
    Key,
    Sid,
    problems,
)
from steerable.service.http._lifecycle import add_lifecycle
from steerable.service.http._limits import (
    fitting,
    input_size,
    message_size,
    read_within_budget,
)
from steerable.service.http._problems import Problem, ProblemError, problem, tenant_of
from steerable.service.http._sse import sse_response, stream

__all__ = ["SSE", "add_routes"]

STATUS_WAITING = 20
"""The most waiting inputs a status answer lists (page the rest with ``GET .../inputs``)."""


def add_routes(app: FastAPI, context: Context, *, bearer: bool) -> None:
    """Every route of the API on ``app``."""
    _health(app, context)
    _inputs(app, context, bearer)
    _sessions(app, context, bearer)
    _history(app, context, bearer)
    _events(app, context, bearer)
    add_lifecycle(app, context, bearer=bearer)


def _health(app: FastAPI, context: Context) -> None:
    @app.get("/healthz", tags=["health"], operation_id="check_liveness")
    async def healthz() -> dict[str, str]:
        """Liveness: the process answers."""
        return {"status": "ok"}

    @app.get(
        "/readyz",
        tags=["health"],
        responses={503: {"model": Problem}},
        operation_id="check_readiness",
    )
    async def readyz() -> Any:
        """Readiness: the store answers a read."""
        try:
            await context.service.status(".readyz")  # no tenant's id: theirs all have a "/"
        except Exception:
            return problem(
                503, "store_unavailable", "the store does not answer", {"Retry-After": "1"}
            )
        return {"status": "ok"}


def _inputs(app: FastAPI, context: Context, bearer: bool) -> None:
    service = context.service

    @app.post(
        "/v1/sessions/{sid}/messages",
        operation_id="send",
        status_code=202,
        response_model=m.Sent,
        responses=problems(bearer, 408, 409, 413, 429),
        tags=["inputs"],
    )
    async def send(request: Request, sid: Sid, body: b.SendBody, key: Key = None) -> m.Sent:
        """Send a message: a turn of its own, started now or queued behind the running one.

        ``if_idle``: refused (409 ``session_not_idle``) unless no turn runs and no input
        waits. A session with its most inputs waiting answers 429 ``queue_full``.
        """
        _, accepted = await context.accept(request, sid, body, key)
        state: Literal["started", "queued"] = "started" if accepted.ahead == 0 else "queued"
        return m.Sent(id=accepted.id, turn=accepted.id, state=state, ahead=accepted.ahead)

    @app.post(
        "/v1/sessions/{sid}/steers",
        operation_id="steer",
        status_code=202,
        response_model=m.Steered,
        responses=problems(bearer, 408, 409, 413, 429),
        tags=["inputs"],
    )
    async def steer(
        request: Request,
        sid: Sid,
        body: b.SteerBody,
        key: Key = None,
        wait: Annotated[float, Query(ge=0, le=MAX_WAIT, allow_inf_nan=False)] = 0,
    ) -> m.Steered:
        """Steer: offered to the started turn (``turn``), else a turn of its own (null).

        The started turn is the running one, or the one about to start; it takes the steer at
        its next step, unless it ends first (its answer was being written): then the steer is
        a turn of its own. ``wait`` seconds (up to 60): the answer waits for that ``fate``.
        ``expected_turn``: refused (409 ``turn_mismatch``) unless the steer joins that turn.
        """
        session, accepted = await context.accept(request, sid, body, key)
        fate = None
        if wait > 0:
            view = await service.fate(session, accepted.id, seconds=wait)
            fate = None if view is None else m.fate_out(view)
        return m.Steered(id=accepted.id, turn=accepted.turn, fate=fate)

    @app.post(
        "/v1/sessions/{sid}/stop",
        operation_id="stop",
        status_code=202,
        response_model=m.Stopped,
        responses=problems(bearer, 404, 408, 413),
        tags=["inputs"],
    )
    async def stop(
        request: Request, sid: Sid, body: b.StopBody | None = None, key: Key = None
    ) -> m.Stopped:
        """Stop the running turn, from any replica (idempotent: the key is accepted)."""
        session = context.session(request, sid)
        turn = await service.stop(session)
        if turn is None:
            await context.known(session)
        return m.Stopped(turn=turn)


def _sessions(app: FastAPI, context: Context, bearer: bool) -> None:
    """The views of sessions: the tenant's list, a session's status."""
    service = context.service

    @app.get(
        "/v1/sessions",
        operation_id="list_sessions",
        response_model=m.SessionsPage,
        responses=problems(bearer),
        tags=["views"],
    )
    async def sessions(
        request: Request,
        state: Literal["idle", "running", "queued"] | None = None,
        after: Annotated[
            str | None, Query(min_length=1, max_length=MAX_ID, pattern=m.NO_NUL)
        ] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    ) -> m.SessionsPage:
        """The tenant's sessions in id order, each with its state; page with ``after``."""
        prefix = tenant_of(request) + "/"
        start = None if after is None else context.session(request, after)
        page = await service.store.sessions(prefix=prefix, after=start, limit=limit, state=state)
        out = [m.session_out(s, prefix) for s in page]
        return m.SessionsPage(sessions=out, next=out[-1].session if len(out) == limit else None)

    @app.get(
        "/v1/sessions/{sid}",
        operation_id="get_status",
        response_model=m.StatusOut,
        responses=problems(bearer, 404),
        tags=["views"],
    )
    async def status(request: Request, sid: Sid) -> m.StatusOut:
        """The running turn, the first inputs waiting (up to 20, and about 4 MB of text:
        ``waiting_next`` pages the rest), the counts and the session's metadata."""
        session = context.session(request, sid)
        now = await service.status(session, limit=STATUS_WAITING)
        if now.turn is None and not now.waiting_total and not now.metadata:
            await context.known(session)
        waiting = [m.input_out(v) for v in fitting(now.waiting, input_size)]
        return m.status_out(sid, now, waiting)


def _history(app: FastAPI, context: Context, bearer: bool) -> None:
    """The views of what a session did: its transcript, a turn, an input."""
    service = context.service

    @app.get(
        "/v1/sessions/{sid}/transcript",
        operation_id="get_transcript",
        response_model=m.TranscriptPage,
        responses=problems(bearer, 404),
        tags=["views"],
    )
    async def transcript(
        request: Request,
        sid: Sid,
        after: Annotated[int, Query(ge=-1, le=MAX_AFTER)] = -1,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    ) -> m.TranscriptPage:
        """The messages after position ``after``, each with its turn; page with ``next``
        (a page stops at ``limit`` messages or about 4 MB of text, whichever comes first)."""
        session = context.session(request, sid)
        entries, more = await read_within_budget(
            lambda start, count: service.transcript(session, after=start, limit=count),
            after=after,
            limit=limit,
            chunk=50,
            size=lambda entry: message_size(entry.message),
            key=lambda entry: entry.position,
        )
        if not entries:
            await context.known(session)
        out = [m.message_out(e) for e in entries]
        return m.TranscriptPage(messages=out, next=out[-1].position if more else None)

    @app.get(
        "/v1/sessions/{sid}/turns/{tid}",
        operation_id="get_turn",
        response_model=m.TurnOut,
        responses=problems(bearer, 404),
        tags=["views"],
    )
    async def turn(
        request: Request,
        sid: Sid,
        tid: Id,
        wait: Annotated[float, Query(ge=0, le=MAX_WAIT, allow_inf_nan=False)] = 0,
    ) -> m.TurnOut:
        """The turn ``tid`` with its output; ``wait`` seconds (up to 60) for it to end."""
        session = context.session(request, sid)
        if wait > 0:
            view = await service.wait(session, tid, seconds=wait)
        else:
            view = await service.turn(session, tid)
        if view is None:
            raise ProblemError(404, "turn_not_found", "no such turn in this session")
        return m.turn_out(view, output=True)

    @app.get(
        "/v1/sessions/{sid}/inputs/{id}",
        operation_id="get_input",
        response_model=m.InputOut,
        responses=problems(bearer, 404),
        tags=["views"],
    )
    async def input(request: Request, sid: Sid, id: Id) -> m.InputOut:
        """An input's fate: waiting, taken (by which turn, at which step), or a turn."""
        view = await service.input(context.session(request, sid), id)
        if view is None:
            raise ProblemError(404, "input_not_found", "no such input in this session")
        return m.input_out(view)


_FRAME = {  # one SSE event (OpenAPI 3.2's itemSchema; also the schema, for 3.1 tools)
    "type": "object",
    "properties": {
        "event": {
            "type": "string",
            "description": "the kind, or delta, tool, refetch, unavailable",
            "examples": ["turn_started", "message", "delta", "tool", "refetch"],
        },
        "id": {"type": "string", "description": "the durable event's id (none on delta, tool)"},
        "data": {
            "type": "string",
            "contentMediaType": "application/json",
            "description": "a durable event {id, kind, turn, data, at}; a delta {turn, text};"
            " a tool {turn, phase: started, call, name, arguments, truncated} or"
            " {turn, phase: ended, call, name, result, error, truncated}",
        },
        "retry": {"type": "integer"},
    },
}
SSE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Server-Sent Events: durable events (with ids), live deltas and tool"
        " calls, keep-alives",
        "content": {"text/event-stream": {"schema": _FRAME, "itemSchema": _FRAME}},
    }
}


def _events(app: FastAPI, context: Context, bearer: bool) -> None:
    @app.get(
        "/v1/sessions/{sid}/events",
        operation_id="follow_events",
        response_class=StreamingResponse,
        responses={**problems(bearer, 404, 429), **SSE},
        tags=["events"],
    )
    async def events(
        request: Request,
        sid: Sid,
        after: Annotated[int | None, Query(ge=0, le=MAX_AFTER)] = None,
        last_event_id: Annotated[
            str | None, Header(alias="Last-Event-ID", max_length=20, pattern=r"^[0-9]+$")
        ] = None,
    ) -> StreamingResponse:
        """The session's events as SSE, after ``Last-Event-ID`` (or ``after``)."""
        session = context.session(request, sid)
        start = int(last_event_id) if last_event_id is not None else (after or 0)
        start = min(start, MAX_AFTER)  # beyond every event whatever its size: a refetch
        await context.known(session)
        release = context.limits.hold_stream(tenant_of(request))  # 429 when at its most
        frames = stream(
            context.service,
            context.live,
            session,
            start,
            keepalive=context.keepalive,
            poll=context.poll,
        )

        return sse_response(frames, release)
