"""The routes of the HTTP API (DESIGN.md, "HTTP API"); docs/http.md is their reference."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Header, Path, Query, Request
from fastapi.dependencies.models import Dependant
from fastapi.responses import StreamingResponse

from steerable.service import Service
from steerable.service._service import MAX_ID, MAX_PAGE
from steerable.service.http import _models as m
from steerable.service.http._live import LiveFeed
from steerable.service.http._problems import (
    Problem,
    ProblemError,
    field_name,
    problem,
    tenant_of,
)
from steerable.service.http._sse import stream
from steerable.service_store import Accepted, InputKind

__all__ = ["Context", "add_routes", "known_query"]

MAX_AFTER = 2**62 - 1
"""The largest ``after`` a route takes: the stores' positions and event ids stay below 2^62."""
MAX_WAIT = 60.0


def _problems(bearer: bool, *statuses: int) -> dict[int | str, dict[str, Any]]:
    """The problems a route documents: 401 only when the app has tokens."""
    listed = (*((401,) if bearer else ()), 422, 503, *statuses)
    return {s: {"model": Problem, "description": "a problem"} for s in listed}


Sid = Annotated[
    str, Path(min_length=1, max_length=MAX_ID, pattern=m.NO_NUL, description="the session's id")
]
Id = Annotated[str, Path(min_length=1, max_length=MAX_ID, pattern=m.NO_NUL)]
Key = Annotated[
    str | None,
    Header(alias="Idempotency-Key", min_length=1, max_length=MAX_ID, description="the input id"),
]


def _query_names(dependant: Dependant) -> set[str]:
    names = {field.alias for field in dependant.query_params}
    for inner in dependant.dependencies:
        names |= _query_names(inner)
    return names


async def known_query(request: Request) -> None:
    """422 for a query parameter the route does not take: refused, as an unknown body field
    is, rather than dropped unread (a misspelt ``limt=5`` would silently be 100)."""
    dependant: Dependant | None = getattr(request.scope.get("route"), "dependant", None)
    known = set() if dependant is None else _query_names(dependant)
    for name in request.query_params:
        if name not in known:
            raise ProblemError(
                422,
                "invalid_request",
                f"query.{field_name(name)}: is not a parameter of this route"
                " (unknown parameters are refused)",
            )


@dataclass(frozen=True, slots=True)
class Context:
    """What the routes share: the service, the live feed, the stream's settings."""

    service: Service
    live: LiveFeed
    keepalive: float
    poll: float

    def session(self, request: Request, sid: str) -> str:
        """The store's id of the tenant's session ``sid``; 422 when it cannot be one."""
        tenant = tenant_of(request)
        room = MAX_ID - len(tenant) - 1
        if len(sid) > room:
            raise ProblemError(
                422, "invalid_request", f"a session id has at most {room} characters here"
            )
        if "\x00" in sid:
            raise ProblemError(422, "invalid_request", "a session id has no NUL")
        return f"{tenant}/{sid}"

    async def exists(self, session: str) -> bool:
        """Whether the session had an input or a transcript."""
        service = self.service
        if await service.events(session, after=0, limit=1):
            return True
        return bool(await service.transcript(session, limit=1))

    async def known(self, session: str) -> None:
        """404 ``session_not_found`` unless the session exists."""
        if not await self.exists(session):
            raise ProblemError(404, "session_not_found", "no such session")

    async def accept(
        self, session: str, kind: InputKind, body: m.SendBody, key: str | None
    ) -> Accepted:
        """Send or steer ``body``, idempotently: the same id with another body is 409."""
        if body.id is not None and key is not None and body.id != key:
            # 409, not 422: each is valid alone, and together they name two inputs
            raise ProblemError(
                409, "idempotency_conflict", "the body's id and the Idempotency-Key differ"
            )
        id = body.id if body.id is not None else key
        verb = self.service.send if kind == "send" else self.service.steer
        accepted = await verb(session, body.text, id=id)
        if accepted.duplicate:
            first = await self.service.input(session, accepted.id)
            if accepted.kind != kind or (first is not None and first.text != body.text):
                raise ProblemError(
                    409, "idempotency_conflict", "this id was used with another body"
                )
        return accepted


def add_routes(app: FastAPI, context: Context, *, bearer: bool) -> None:
    """Every route of the API on ``app``."""
    _health(app, context)
    _inputs(app, context, bearer)
    _sessions(app, context, bearer)
    _history(app, context, bearer)
    _events(app, context, bearer)


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
        responses=_problems(bearer, 409, 413),
        tags=["inputs"],
    )
    async def send(request: Request, sid: Sid, body: m.SendBody, key: Key = None) -> m.Sent:
        """Send a message: a turn of its own, started now or queued behind the running one."""
        accepted = await context.accept(context.session(request, sid), "send", body, key)
        state: Literal["started", "queued"] = "started" if accepted.ahead == 0 else "queued"
        return m.Sent(id=accepted.id, turn=accepted.id, state=state)

    @app.post(
        "/v1/sessions/{sid}/steers",
        operation_id="steer",
        status_code=202,
        response_model=m.Steered,
        responses=_problems(bearer, 409, 413),
        tags=["inputs"],
    )
    async def steer(request: Request, sid: Sid, body: m.SteerBody, key: Key = None) -> m.Steered:
        """Steer: offered to the running turn's next step (``turn``), else a turn of its own."""
        accepted = await context.accept(context.session(request, sid), "steer", body, key)
        return m.Steered(id=accepted.id, turn=accepted.turn)

    @app.post(
        "/v1/sessions/{sid}/stop",
        operation_id="stop",
        status_code=202,
        response_model=m.Stopped,
        responses=_problems(bearer, 404, 413),
        tags=["inputs"],
    )
    async def stop(
        request: Request, sid: Sid, body: m.StopBody | None = None, key: Key = None
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
        responses=_problems(bearer),
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
        responses=_problems(bearer, 404),
        tags=["views"],
    )
    async def status(request: Request, sid: Sid) -> m.StatusOut:
        """The running turn, the inputs waiting, how many wait to be turns."""
        session = context.session(request, sid)
        now = await service.status(session)
        if now.turn is None and not now.waiting and not now.queued:
            await context.known(session)
        return m.status_out(sid, now)


def _history(app: FastAPI, context: Context, bearer: bool) -> None:
    """The views of what a session did: its transcript, a turn, an input."""
    service = context.service

    @app.get(
        "/v1/sessions/{sid}/transcript",
        operation_id="get_transcript",
        response_model=m.TranscriptPage,
        responses=_problems(bearer, 404),
        tags=["views"],
    )
    async def transcript(
        request: Request,
        sid: Sid,
        after: Annotated[int, Query(ge=-1, le=MAX_AFTER)] = -1,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    ) -> m.TranscriptPage:
        """The messages after position ``after``, each with its turn; page with ``next``."""
        session = context.session(request, sid)
        entries = await service.transcript(session, after=after, limit=limit)
        if not entries:
            await context.known(session)
        out = [m.message_out(e) for e in entries]
        return m.TranscriptPage(messages=out, next=out[-1].position if len(out) == limit else None)

    @app.get(
        "/v1/sessions/{sid}/turns/{tid}",
        operation_id="get_turn",
        response_model=m.TurnOut,
        responses=_problems(bearer, 404),
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
        responses=_problems(bearer, 404),
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
        "event": {"type": "string", "description": "the kind, or delta, refetch, unavailable"},
        "id": {"type": "string", "description": "the durable event's id (none on a delta)"},
        "data": {"type": "string", "contentMediaType": "application/json"},
        "retry": {"type": "integer"},
    },
}
SSE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Server-Sent Events: durable events (with ids), deltas, keep-alives",
        "content": {"text/event-stream": {"schema": _FRAME, "itemSchema": _FRAME}},
    }
}


def _events(app: FastAPI, context: Context, bearer: bool) -> None:
    @app.get(
        "/v1/sessions/{sid}/events",
        operation_id="follow_events",
        response_class=StreamingResponse,
        responses={**_problems(bearer, 404), **SSE},
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
        frames = stream(
            context.service,
            context.live,
            session,
            start,
            keepalive=context.keepalive,
            poll=context.poll,
        )
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return StreamingResponse(frames, media_type="text/event-stream", headers=headers)
