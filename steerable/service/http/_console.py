"""The web console: static files shipped in the package, served at ``/console``.

The page holds no data of its own. Its script calls the ``/v1`` API like any other client,
with the bearer token the user types (when the server has tokens), so the console sees
exactly what that token's tenant may see; the files themselves need no token. No build
step: plain HTML, JavaScript and CSS in ``console/``, read once when the app is made.
"""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI
from fastapi.responses import Response

__all__ = ["CONSOLE_FILES", "add_console"]

CONSOLE_FILES = {
    "index.html": "text/html; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
}
"""The console's files (in ``steerable/service/http/console/``) and their media types."""

_HEADERS = {
    # Only this origin's own script and style; data only from the API beside it.
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self';"
        " img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def _read(name: str) -> bytes:
    return resources.files("steerable.service.http").joinpath("console", name).read_bytes()


def add_console(app: FastAPI) -> None:
    """``GET /console`` (the page) and ``/console/{file}`` (its script and style) on ``app``;
    not in the API's schema: they are the page, not the API."""
    files = {name: (_read(name), media) for name, media in CONSOLE_FILES.items()}

    def answer(name: str) -> Response:
        body, media = files[name]
        return Response(body, media_type=media, headers=_HEADERS)

    @app.get("/console", include_in_schema=False)
    async def console_page() -> Response:
        """The console's page."""
        return answer("index.html")

    @app.get("/console/console.js", include_in_schema=False)
    async def console_script() -> Response:
        """The console's script."""
        return answer("console.js")

    @app.get("/console/console.css", include_in_schema=False)
    async def console_style() -> Response:
        """The console's style."""
        return answer("console.css")
