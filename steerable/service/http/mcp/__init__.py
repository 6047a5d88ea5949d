"""MCP for the service (docs/protocols/mcp.md): tools and resources over streamable HTTP.

``mount(app, context)`` serves the MCP server of :func:`build_server` at ``/v1/mcp``, behind
the bearer gate (each request's tenant is its token's) and the body limit. The streamable
HTTP session manager of the ``mcp`` package runs inside the app's lifespan: ``mount`` wraps
``app.router.lifespan_context`` so the manager starts after the app's own lifespan (the live
feed, the replica) and ends before it. ``steerable mcp`` serves the same server over stdio
(:mod:`steerable.cli.mcp`).

This package is named ``mcp`` like the official package it is built on; every import here is
absolute, so ``import mcp`` and ``from mcp.server import ...`` are always the official one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from steerable.service.http._context import Context
from steerable.service.http.mcp._resources import Followers
from steerable.service.http.mcp._server import build_server

__all__ = ["PATH", "Followers", "build_server", "mount"]

PATH = "/v1/mcp"
"""Where the streamable HTTP endpoint is."""


class _Endpoint:
    """The ASGI app of :data:`PATH` (a class: Starlette wraps a plain function as a
    request-response endpoint)."""

    def __init__(self, manager: StreamableHTTPSessionManager) -> None:
        self.manager = manager

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The gate set the tenant; as the session's owner, it keeps another tenant's token
        # from using this MCP session's id (the manager answers 404 as for an unknown one).
        tenant: Any = scope.get("tenant")
        scope["user"] = AuthenticatedUser(AccessToken(token="", client_id=tenant, scopes=[]))
        await self.manager.handle_request(scope, receive, send)


def mount(app: FastAPI, context: Context) -> None:
    """Serve MCP over streamable HTTP at :data:`PATH` on ``app``."""
    followers = Followers(context)
    manager = StreamableHTTPSessionManager(build_server(context, followers))

    endpoint = _Endpoint(manager)
    app.router.routes.append(Route(PATH, endpoint, methods=["GET", "POST", "DELETE"]))
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[Any]:
        async with inner(app) as state, manager.run():
            try:
                yield state
            finally:
                await followers.close()

    app.router.lifespan_context = lifespan
