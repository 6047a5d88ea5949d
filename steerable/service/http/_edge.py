"""What the app answers at its edge, before any route: HEAD, a trailing slash, and CORS when
it is asked for.

HEAD is answered wherever GET is (HTTP's rule; FastAPI routes only the methods they name):
the request is served as a GET and the answer's body is dropped, its status and headers
kept. An event stream answered to a HEAD ends after its headers.

CORS is off unless ``create_app(cors_origins=[...])`` names the origins a browser page may
call the API from (``["*"]``: any). Bearer tokens travel in a header, not in cookies, so no
credentials mode is needed or allowed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from steerable.errors import UsageError

__all__ = ["CORS_HEADERS", "HeadAsGet", "TrailingSlash", "check_origins", "cors_options"]

CORS_HEADERS = ["Authorization", "Content-Type", "Idempotency-Key", "Last-Event-ID"]
"""The request headers a page may send: the token, a JSON body, the two of the API."""
_EXPOSED = ["Retry-After", "WWW-Authenticate", "Allow"]
_ORIGIN = re.compile(r"https?://[A-Za-z0-9.\-\[\]:]+(:[0-9]{1,5})?")


def check_origins(origins: object) -> list[str]:
    """``origins`` checked: ``scheme://host[:port]`` each (no path, no trailing slash), or
    ``"*"`` alone. An origin a browser never sends would silently allow nothing."""
    if isinstance(origins, str) or not isinstance(origins, Sequence):
        raise UsageError("`cors_origins` is a list of origins, like ['https://app.example']")
    checked: list[str] = []
    for origin in origins:
        if origin == "*" and len(origins) == 1:
            return ["*"]
        if not isinstance(origin, str) or not _ORIGIN.fullmatch(origin):
            raise UsageError(
                "an origin of `cors_origins` is scheme://host[:port] with no path"
                " (or '*' alone for any)"
            )
        checked.append(origin)
    return checked


def cors_options(origins: list[str]) -> dict[str, Any]:
    """The options of Starlette's CORS middleware for ``origins``: preflights are answered
    there, outside the token gate (a browser's preflight carries no token)."""
    return {
        "allow_origins": origins,
        "allow_methods": ["GET", "HEAD", "POST", "PUT", "DELETE"],
        "allow_headers": CORS_HEADERS,
        "expose_headers": _EXPOSED,
        "max_age": 600,
    }


class HeadAsGet:
    """ASGI middleware: a HEAD is served as a GET, with the answer's body left out."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return
        ended = False
        # Before ASGI 2.4 a stream learns the client left from ``receive``, which says so once
        # the answer is complete; from 2.4 on, from ``send`` failing with OSError.
        version = str(scope.get("asgi", {}).get("spec_version", "2.0"))
        raises = tuple(int(x) for x in version.split(".")[:2] if x.isdigit()) >= (2, 4)

        async def head(message: Message) -> None:
            nonlocal ended
            if ended:
                if raises and message.get("more_body", False):
                    raise OSError("the answer to a HEAD has no body")
                return
            if message["type"] == "http.response.start":
                await send(message)
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                ended = True

        await self.app({**scope, "method": "GET"}, receive, head)


class TrailingSlash:
    """ASGI middleware: a path ending in ``/`` is redirected (307: method and body kept) to
    the same path without it, query included.

    Starlette's own redirect builds an absolute URL from the Host header and the scheme it
    saw, which behind a TLS proxy is ``http://``: a page on ``https://`` would be sent to
    plain HTTP (blocked as mixed content, and another origin for CORS). This one sends the
    path alone, which the client resolves against the URL it used.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope.get("path", "")
        if scope["type"] != "http" or len(path) < 2 or not path.endswith("/"):
            await self.app(scope, receive, send)
            return
        root: str = scope.get("root_path", "")
        raw = scope.get("raw_path")
        if isinstance(raw, bytes):  # as the client wrote it: its escapes kept
            given = raw.decode("latin-1")
            target = given if given.startswith(root) else root + given
        else:
            target = quote(path)
        target = target.rstrip("/") or "/"
        query: bytes = scope.get("query_string", b"")
        if query:
            target += "?" + query.decode("latin-1")
        headers = [(b"location", target.encode("latin-1")), (b"content-length", b"0")]
        await send({"type": "http.response.start", "status": 307, "headers": headers})
        await send({"type": "http.response.body", "body": b""})
