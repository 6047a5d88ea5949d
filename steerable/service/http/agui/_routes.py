"""The AG-UI routes: ``POST /v1/ag-ui`` (a run) and ``POST /v1/ag-ui/{thread}/stop``.

A run's input is the last of ``RunAgentInput.messages`` when it is a user message: its text
is sent (the run's turn, when the thread is idle) or steered (into the turn going on), with
the ``runId`` as the input's id, so a run posted again is the same input and follows the
same turn (a reconnect). The rest of ``messages``, ``tools``, ``state``, ``context`` and
``forwardedProps`` are not used: steerable keeps the transcript, and the agent its tools.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator

from ag_ui.core import RunAgentInput, TextPart, UserMessage
from ag_ui.encoder import EventEncoder
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

from steerable.errors import SessionNotIdle
from steerable.service._service import MAX_ID
from steerable.service.http import _models as m
from steerable.service.http._context import Context, Sid, problems
from steerable.service.http._problems import ProblemError, tenant_of
from steerable.service.http._routes import SSE
from steerable.service.http._sse import last_event, sse_response
from steerable.service.http.agui._follow import Run, follow, target_of
from steerable.service_store import Accepted

__all__ = ["mount"]


def mount(app: FastAPI, context: Context) -> None:
    """Add the AG-UI routes to ``app``."""
    bearer = True

    @app.post(
        "/v1/ag-ui",
        operation_id="agui_run",
        response_class=StreamingResponse,
        responses={**problems(bearer, 409, 413, 429), **SSE},
        tags=["ag-ui"],
    )
    async def run(request: Request, body: RunAgentInput) -> StreamingResponse:
        """Run (or steer, or follow) the thread's turn; its AG-UI events as SSE."""
        session = context.session(request, _thread(body.thread_id))
        run_id = _run_id(body.run_id)
        text = _text(body)
        release = context.limits.hold_stream(tenant_of(request))  # 429 when at its most
        try:
            frames = _run_frames(context, request, session, body.thread_id, run_id, text)
            first = await anext(frames)  # the input accepted (a refusal raises here): started
        except BaseException:
            release()
            raise
        return sse_response(_then(first, frames), release, EventEncoder().get_content_type())

    @app.post(
        "/v1/ag-ui/{thread}/stop",
        operation_id="agui_stop",
        status_code=202,
        response_model=m.Stopped,
        responses=problems(bearer, 404),
        tags=["ag-ui"],
    )
    async def stop(request: Request, thread: Sid) -> m.Stopped:
        """Stop the thread's running turn (AG-UI has no verb for it); its runs end with the
        outcome ``cancelled``."""
        session = context.session(request, thread)
        turn = await context.service.stop(session)
        if turn is None:
            await context.known(session)
        return m.Stopped(turn=turn)


def _thread(thread: str) -> str:
    if not thread or "/" in thread:
        raise ProblemError(422, "invalid_request", "body.threadId: is empty or holds a /")
    return thread


def _run_id(run_id: str) -> str:
    if not run_id or "\x00" in run_id or len(run_id) > MAX_ID:
        raise ProblemError(
            422, "invalid_request", f"body.runId: has 1 to {MAX_ID} characters, no NUL"
        )
    return run_id


def _text(body: RunAgentInput) -> str | None:
    """The text of the last message when it is a user message (None: no input)."""
    if not body.messages or not isinstance(body.messages[-1], UserMessage):
        return None
    content = body.messages[-1].content
    if isinstance(content, str):
        text = content
    elif all(isinstance(part, TextPart) for part in content):
        text = "".join(part.text for part in content if isinstance(part, TextPart))
    else:
        raise ProblemError(
            422, "invalid_request", "body.messages: the last one has parts other than text"
        )
    if not text.strip() or "\x00" in text:
        raise ProblemError(
            422, "invalid_request", "body.messages: the last one's text is blank or holds NUL"
        )
    return text


async def _run_frames(
    context: Context, request: Request, session: str, thread: str, run_id: str, text: str | None
) -> AsyncGenerator[str, None]:
    """The run's frames, subscribed to the thread's live events before its input is written:
    a tool call that starts at once is not missed (live events are never replayed)."""
    async with context.live.subscribe(session) as subscription:
        after = await last_event(context.service, session)
        run = await _start(context, request, session, thread, run_id, text)
        async for frame in follow(context, run, after, subscription):
            yield frame


async def _then(first: str, rest: AsyncGenerator[str, None]) -> AsyncIterator[str]:
    """``first``, then ``rest``, which is closed however this ends. ``rest`` has started, so
    the subscription it holds is left even when this never starts (its finalizer closes it)."""
    try:
        yield first
        async for frame in rest:
            yield frame
    finally:
        await rest.aclose()


async def _start(
    context: Context, request: Request, session: str, thread: str, run_id: str, text: str | None
) -> Run:
    """The run: its input accepted (a send, else a steer), and the turn it follows."""
    service = context.service
    if text is None:  # nothing to say: follow the turn going on, if any
        now = await service.status(session, limit=1)
        target = None if now.turn is None else now.turn.id
        return Run(service, session, thread, run_id, target, reconnect=True)
    accepted = await _accept(context, request, session, run_id, text)
    view = await service.input(session, accepted.id)
    target = accepted.id if view is None else target_of(view)
    return Run(
        service, session, thread, run_id, target, input=accepted.id, reconnect=accepted.duplicate
    )


async def _accept(
    context: Context, request: Request, session: str, run_id: str, text: str
) -> Accepted:
    """Send ``text`` if the thread is idle, else steer it into the started turn; one input
    however often the run is posted (its id is the ``runId``)."""
    service = context.service
    context.limits.spend(tenant_of(request))
    try:
        accepted = await service.send(session, text, id=run_id, if_idle=True)
    except SessionNotIdle:
        accepted = await service.steer(session, text, id=run_id)
    if accepted.duplicate:
        first = await service.input(session, accepted.id)
        if first is not None and first.text != text:
            raise ProblemError(
                409, "idempotency_conflict", "this runId was used with another message"
            )
    return accepted
