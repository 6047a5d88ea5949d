"""A request's id: ``X-Request-Id`` on every answer, and on every log line written for it.

The client's own id is kept when it is one a log can hold as it is (1 to 128 characters of
``[A-Za-z0-9._-]``: a proxy's or a caller's trace of the request), else the request gets a
new one. While the request is served the id is :data:`steerable._logs.request_id`, which
:class:`~steerable._logs.RequestIdFilter` copies onto each log line.
"""

from __future__ import annotations

import re
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from steerable._logs import request_id
from steerable.service.http._problems import problem

__all__ = ["HEADER", "RequestIds", "sane_id"]

HEADER = "X-Request-Id"
_NAME = HEADER.lower().encode("latin-1")
_SANE = re.compile(rb"[A-Za-z0-9._-]{1,128}")


def sane_id(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The request's ``X-Request-Id`` if it is one to keep (see the module), else None."""
    for name, value in headers:
        if name.lower() == _NAME:
            return value.decode("ascii") if _SANE.fullmatch(value) else None
    return None


class RequestIds:
    """ASGI middleware: each HTTP request has an id while it is served, sent back in
    ``X-Request-Id``. Outermost of the app's own, so an answer of any of them carries it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = sane_id(list(scope.get("headers", ())))
        rid = given if given is not None else uuid.uuid4().hex
        header = (_NAME, rid.encode("ascii"))
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                kept = [h for h in message.get("headers", ()) if h[0].lower() != _NAME]
                message = {**message, "headers": [*kept, header]}
            await send(message)

        token = request_id.set(rid)
        try:
            await self.app(scope, receive, sending)
        except Exception:
            # A bug: Starlette's outermost layer logs it and answers 500, outside this one.
            # The answer is sent from here, so it has the id too (that layer then sends
            # nothing); the id stays set, so its log line and the traceback carry it (the
            # request's task ends with it).
            if not started:
                answer = problem(500, "internal_error", "an unexpected error; see the server's log")
                await answer(scope, receive, sending)
            raise
        request_id.reset(token)
