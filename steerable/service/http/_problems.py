"""Errors as ``application/problem+json`` with a stable ``code``, and the bearer-token gate.

Every error the app answers, ours, FastAPI's (validation) and Starlette's (unknown route,
wrong method), goes through :func:`problem`, so a client reads one shape everywhere:
``{type, title, status, detail, code}``.
"""

from __future__ import annotations

import hmac
import logging
import re
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from steerable.errors import (
    QueueFull,
    SessionBusy,
    SessionNotIdle,
    StoreUnavailable,
    TurnMismatch,
    UsageError,
)

__all__ = [
    "PROBLEM",
    "BearerGate",
    "BodyLimit",
    "Problem",
    "ProblemError",
    "check_tokens",
    "field_name",
    "install_handlers",
    "problem",
]

log = logging.getLogger("steerable.service.http")

PROBLEM = "application/problem+json"
TENANT = re.compile(r"[A-Za-z0-9_.-]{1,64}")
DEFAULT_TENANT = "default"

_TITLES = {
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    409: "Conflict",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    422: "Unprocessable Content",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
_CODES = {
    400: "bad_request",
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    408: "body_timeout",
    409: "conflict",
    413: "too_large",
    415: "unsupported_media_type",
    422: "invalid_request",
    429: "too_many_requests",
    500: "internal_error",
    503: "store_unavailable",
}


class Problem(BaseModel):
    """An error answer (RFC 9457): ``code`` is stable, ``detail`` is for people."""

    type: str
    title: str
    status: int
    detail: str
    code: str


class ProblemError(Exception):
    """An error answer raised from a route."""

    def __init__(
        self, status: int, code: str, detail: str, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.headers = dict(headers or {})


def problem(
    status: int, code: str | None, detail: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    """The ``application/problem+json`` answer."""
    code = code or _CODES.get(status, "error")
    body = {
        "type": f"https://steerable.dev/problems/{code}",
        "title": _TITLES.get(status, "Error"),
        "status": status,
        "detail": detail,
        "code": code,
    }
    return JSONResponse(body, status_code=status, headers=dict(headers or {}), media_type=PROBLEM)


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")
_PLAIN = {  # the rules, in words, where pydantic's own message reads as code
    "extra_forbidden": "is not a field of this body (unknown fields are refused)",
    "missing": "is required",
}
_NUL_PATTERN = r"^[^\x00]+$"


def field_name(name: object) -> str:
    """``name`` as a problem may show it: a plain name as it is, anything else as ``[?]``.

    Names come from the caller too (an unknown field, an unknown parameter): one that is
    not a short identifier is not repeated, so no problem carries the caller's text.
    """
    if isinstance(name, int) and not isinstance(name, bool):
        return str(name)
    if isinstance(name, str) and _NAME.fullmatch(name):
        return name
    return "[?]"


def _rule(error: Mapping[str, Any]) -> str:
    kind = str(error.get("type", ""))
    context = error.get("ctx") or {}
    if kind in _PLAIN:
        return _PLAIN[kind]
    if kind == "string_pattern_mismatch" and context.get("pattern") == _NUL_PATTERN:
        return "holds NUL, which no id may"
    message = str(error.get("msg", "")) or "is not valid"
    given = error.get("input")
    if isinstance(given, str) and given and (given in message or repr(given) in message):
        return f"is not valid ({field_name(kind)})"  # the message repeats the input: not sent
    return message[:200]


def _validation_detail(exc: RequestValidationError) -> str:
    # where and which rule, never the input: it may be huge, hostile, or not even printable
    parts = []
    for error in exc.errors()[:5]:
        loc = tuple(error.get("loc", ()))
        if error.get("type") == "json_invalid" and len(loc) == 2:  # ("body", offset)
            parts.append(f"body: is not JSON (at character {field_name(loc[1])})")
            continue
        where = ".".join(field_name(x) for x in loc)
        parts.append(f"{where}: {_rule(error)}")
    return "; ".join(parts) or "the request is not valid"


def install_handlers(app: FastAPI) -> None:
    """Make every error of ``app`` a problem."""

    async def ours(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ProblemError)
        return problem(exc.status, exc.code, exc.detail, exc.headers)

    async def validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return problem(422, "invalid_request", _validation_detail(exc))

    async def usage(request: Request, exc: Exception) -> JSONResponse:
        # The library's own check, past the routes' (which name the field and the rule): its
        # message may quote the value, so it goes to the log, and the answer says less.
        log.info("a request broke a rule of the service on %s: %s", request.url.path, exc)
        return problem(422, "invalid_request", "the request breaks a rule of the service")

    async def unavailable(request: Request, exc: Exception) -> JSONResponse:
        log.warning("the store is unavailable: %s", exc)
        return problem(503, "store_unavailable", "the store is unavailable", {"Retry-After": "1"})

    async def starlette(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        detail = exc.detail if isinstance(exc.detail, str) else "error"
        if exc.status_code == 400:  # FastAPI's "error parsing the body": bad input like any
            return problem(422, "invalid_request", detail)
        headers = dict(exc.headers or {})
        allow = headers.get("Allow", "")
        if "GET" in allow.split(", ") and "HEAD" not in allow:
            headers["Allow"] = f"{allow}, HEAD"  # HeadAsGet answers HEAD wherever GET is
        return problem(exc.status_code, None, detail, headers)

    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.error("unexpected error on %s", request.url.path, exc_info=exc)
        return problem(500, "internal_error", "an unexpected error; see the server's log")

    async def refused(request: Request, exc: Exception) -> JSONResponse:
        # the store's refusals, in words that quote no id (ids are the caller's text)
        if isinstance(exc, SessionNotIdle):
            what = "a turn is running" if exc.turn else f"{exc.waiting} input(s) wait"
            return problem(409, "session_not_idle", f"the session is not idle ({what})")
        if isinstance(exc, TurnMismatch):
            now = "another turn takes steers now" if exc.offered else "no turn takes steers now"
            detail = f"the steer would not join its expected turn ({now})"
            return problem(409, "turn_mismatch", detail)
        if isinstance(exc, QueueFull):
            detail = f"the session has {exc.limit} inputs waiting, its most; try again later"
            return problem(429, "queue_full", detail, {"Retry-After": "2"})
        assert isinstance(exc, SessionBusy)
        return problem(409, "session_busy", "a turn is running on the session; stop it first")

    for refusal in (SessionNotIdle, TurnMismatch, QueueFull, SessionBusy):
        app.add_exception_handler(refusal, refused)
    app.add_exception_handler(ProblemError, ours)
    app.add_exception_handler(RequestValidationError, validation)
    app.add_exception_handler(UsageError, usage)
    app.add_exception_handler(StoreUnavailable, unavailable)
    app.add_exception_handler(StarletteHTTPException, starlette)
    app.add_exception_handler(Exception, unexpected)


def check_tokens(tokens: Mapping[str, str] | None, allow_tenantless: bool) -> dict[str, str]:
    """``tokens`` checked (token -> tenant); empty means one tenant and no auth."""
    if tokens is None:
        if not allow_tenantless:
            raise UsageError("no tokens given and allow_tenantless=False: pass tokens={...}")
        return {}
    if not isinstance(tokens, Mapping) or not tokens:
        raise UsageError("tokens map bearer tokens to tenant names: {'token': 'tenant'}")
    checked: dict[str, str] = {}
    for token, tenant in tokens.items():
        if not isinstance(token, str) or not token or not token.isascii() or " " in token:
            raise UsageError("a token is a non-empty ASCII str without spaces")
        if not isinstance(tenant, str) or not TENANT.fullmatch(tenant):
            raise UsageError(f"a tenant name matches [A-Za-z0-9_.-]{{1,64}}, not {tenant!r}")
        checked[token] = tenant
    return checked


class BearerGate:
    """ASGI middleware: ``/v1/`` needs a known bearer token; sets ``scope['tenant']``.

    A middleware rather than a dependency so a request without a token is 401 before
    anything else of it is read (its body, its parameters).
    """

    def __init__(self, app: ASGIApp, tokens: dict[str, str]) -> None:
        self.app = app
        self.tokens = [(t.encode("ascii"), tenant) for t, tenant in tokens.items()]

    def tenant_of(self, headers: list[tuple[bytes, bytes]]) -> str | None:
        """The tenant of the request's bearer token, or None."""
        if not self.tokens:
            return DEFAULT_TENANT
        for name, value in headers:
            if name.lower() == b"authorization":
                scheme, _, given = value.strip().partition(b" ")
                if scheme.lower() != b"bearer":
                    return None
                found = None
                for token, tenant in self.tokens:  # every one compared: no early answer
                    if hmac.compare_digest(token, given.strip()):
                        found = tenant
                return found
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _app_path(scope).startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        tenant = self.tenant_of(list(scope.get("headers", ())))
        if tenant is None:
            answer = problem(
                401,
                "unauthorized",
                "a valid bearer token is needed: Authorization: Bearer TOKEN",
                {"WWW-Authenticate": 'Bearer realm="steerable"'},
            )
            await answer(scope, receive, send)
            return
        scope["tenant"] = tenant
        await self.app(scope, receive, send)


def _app_path(scope: Scope) -> str:
    """The path inside this app: under a mount (``app.mount("/api", ...)``) or a proxy's
    root path, ``scope["path"]`` starts with ``scope["root_path"]``."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root):
        return path[len(root) :]
    return path


class BodyLimit:
    """ASGI middleware: a request body over ``max_body`` bytes is 413 ``too_large``.

    By its Content-Length, before any of it is read; without one (chunked), by counting
    what arrives, buffered up to the bound (so at most ``max_body`` bytes are held) and
    replayed to the app once the body ended. The rest of an oversized body is never read.
    """

    def __init__(self, app: ASGIApp, max_body: int) -> None:
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = None
        for name, value in scope.get("headers", ()):
            if name.lower() == b"content-length":
                length = value.strip()
        if length is not None:
            # the server reads no more than the Content-Length says (a bad one is its 400)
            if length.isdigit() and int(length) > self.max_body:
                await self.too_large(scope, receive, send)
                return
            await self.app(scope, receive, send)
            return
        buffered: list[Message] = []
        total = 0
        while True:
            message = await receive()
            buffered.append(message)
            if message["type"] != "http.request":
                break  # the client left: the app sees it
            total += len(message.get("body", b""))
            if total > self.max_body:
                await self.too_large(scope, receive, send)
                return
            if not message.get("more_body", False):
                break

        async def replay() -> Message:
            return buffered.pop(0) if buffered else await receive()

        await self.app(scope, replay, send)

    async def too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The 413; the connection is closed, as the rest of the body is not read."""
        answer = problem(
            413,
            "too_large",
            f"a request body has at most {self.max_body} bytes",
            {"Connection": "close"},
        )
        await answer(scope, receive, send)


def tenant_of(request: Request) -> str:
    """The tenant :class:`BearerGate` found for ``request``."""
    tenant: Any = request.scope.get("tenant")
    assert isinstance(tenant, str), "BearerGate runs before every /v1/ route"
    return tenant
