"""The routes of a session's lifecycle: its inputs and turns paged, an input taken back, its
metadata, a fork (and resume at a message), and the session deleted (docs/http.md)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import FastAPI, Query, Request, Response

from steerable.errors import MessageNotFound, SessionExists
from steerable.service._service import MAX_PAGE
from steerable.service.http import _bodies as b
from steerable.service.http import _models as m
from steerable.service.http._context import MAX_AFTER, Context, Id, Sid, problems
from steerable.service.http._limits import input_size, read_within_budget
from steerable.service.http._problems import ProblemError
from steerable.service_store import InputState

__all__ = ["add_lifecycle"]

_IN_ANSWER: dict[str, InputState] = {
    "waiting": "waiting",
    "taken": "taken",
    "turn": "prompt",
    "cancelled": "cancelled",
}


def add_lifecycle(app: FastAPI, context: Context, *, bearer: bool) -> None:
    """The lifecycle routes on ``app``."""
    service = context.service

    @app.get(
        "/v1/sessions/{sid}/inputs",
        operation_id="list_inputs",
        response_model=m.InputsPage,
        responses=problems(bearer, 404),
        tags=["views"],
    )
    async def inputs(
        request: Request,
        sid: Sid,
        after: Annotated[int, Query(ge=0, le=MAX_AFTER)] = 0,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
        state: Literal["waiting", "taken", "turn", "cancelled"] | None = None,
    ) -> m.InputsPage:
        """The session's inputs by ``seq`` after ``after`` (only ``state``, if given); a page
        stops at ``limit`` inputs or about 4 MB of text; ``next`` is the next ``after``."""
        session = context.session(request, sid)
        wanted = None if state is None else _IN_ANSWER[state]
        views, more = await read_within_budget(  # in chunks: inputs are up to 1 MB each
            lambda start, count: service.inputs(session, after=start, limit=count, state=wanted),
            after=after,
            limit=limit,
            chunk=20,
            size=input_size,
            key=lambda view: view.seq,
        )
        if not views:
            await context.known(session)
        out = [m.input_out(v) for v in views]
        return m.InputsPage(inputs=out, next=out[-1].seq if more and out else None)

    @app.delete(
        "/v1/sessions/{sid}/inputs/{id}",
        operation_id="cancel_input",
        response_model=m.InputOut,
        responses=problems(bearer, 404, 409),
        tags=["inputs"],
    )
    async def cancel(request: Request, sid: Sid, id: Id) -> m.InputOut:
        """Take back a waiting input: it will never be a turn nor be taken. An input that
        was taken or became a turn is 409 ``input_not_waiting`` (nothing changes); one
        cancelled already is answered as it is."""
        view = await service.cancel(context.session(request, sid), id)
        if view is None:
            raise ProblemError(404, "input_not_found", "no such input in this session")
        if view.state in ("taken", "prompt"):
            raise ProblemError(
                409,
                "input_not_waiting",
                "the input was answered already (taken by a turn, or a turn of its own)",
            )
        return m.input_out(view)

    @app.get(
        "/v1/sessions/{sid}/turns",
        operation_id="list_turns",
        response_model=m.TurnsPage,
        responses=problems(bearer, 404),
        tags=["views"],
    )
    async def turns(
        request: Request,
        sid: Sid,
        after: Annotated[int, Query(ge=0, le=MAX_AFTER)] = 0,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    ) -> m.TurnsPage:
        """The turns that started, in order (by their prompts' ``seq``, after ``after``),
        with their times and usage; their answers are on ``GET .../turns/{tid}``."""
        session = context.session(request, sid)
        page = await service.turns(session, after=after, limit=limit)
        if not page:
            await context.known(session)
        out = [m.turn_out(view) for view in page]
        return m.TurnsPage(turns=out, next=out[-1].seq if len(out) == limit else None)

    @app.put(
        "/v1/sessions/{sid}/metadata",
        operation_id="set_metadata",
        response_model=m.MetadataOut,
        responses=problems(bearer, 408, 413),
        tags=["sessions"],
    )
    async def set_metadata(request: Request, sid: Sid, body: b.MetadataBody) -> m.MetadataOut:
        """Replace the session's metadata (a JSON object of at most 16 KB); the session need
        not exist yet. Status and the listing return it."""
        await service.set_metadata(context.session(request, sid), body.metadata)
        return m.MetadataOut(metadata=body.metadata)

    @app.post(
        "/v1/sessions/{sid}/fork",
        operation_id="fork_session",
        status_code=201,
        response_model=m.Forked,
        responses=problems(bearer, 404, 408, 409, 413, 429),
        tags=["sessions"],
    )
    async def fork(request: Request, sid: Sid, body: b.ForkBody) -> m.Forked:
        """Start the session ``body.session`` from this one's transcript through the message
        ``at`` (all of it when absent): nothing else is copied (the steers and inputs
        waiting here stay here). With ``text``, that is sent to the new session: the
        conversation resumes at the message. 404 ``message_not_found`` when ``at`` is not in
        the transcript; 409 ``session_exists`` when the new session has anything."""
        old = context.session(request, sid)
        new = context.session(request, body.session)
        if not await service.transcript(old, limit=1):
            await context.known(old)
        if old == new:  # valid as the schema says, and this session exists: it is taken
            raise ProblemError(
                409, "session_exists", "the new session exists already; fork into a new id"
            )
        try:
            copied, sent = await service.fork(old, new, at=body.at, text=body.text, id=body.id)
        except MessageNotFound:
            raise ProblemError(
                404, "message_not_found", "no such message in this session's transcript"
            ) from None
        except SessionExists:
            raise ProblemError(
                409, "session_exists", "the new session exists already; fork into a new id"
            ) from None
        answer = None
        if sent is not None:
            state: Literal["started", "queued"] = "started" if sent.ahead == 0 else "queued"
            answer = m.Sent(id=sent.id, turn=sent.id, state=state, ahead=sent.ahead)
        return m.Forked(session=body.session, messages=copied, sent=answer)

    @app.delete(
        "/v1/sessions/{sid}",
        operation_id="delete_session",
        status_code=204,
        response_class=Response,
        responses=problems(bearer, 404, 409),
        tags=["sessions"],
    )
    async def delete(request: Request, sid: Sid) -> Response:
        """Delete the session: its transcript, inputs, turns, events and metadata. Refused
        with 409 ``session_busy`` while a turn runs (stop it, then delete); inputs waiting
        are deleted with it."""
        if not await service.delete(context.session(request, sid)):
            raise ProblemError(404, "session_not_found", "no such session")
        return Response(status_code=204)
