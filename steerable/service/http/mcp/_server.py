"""The MCP server over a :class:`Context`: the low-level ``mcp.server.Server`` with the
tools of :mod:`._tools` and the resources of :mod:`._resources`.

One server answers every tenant: each request's tenant is the one the bearer gate set on
its HTTP request (``scope["tenant"]``), or, over stdio, the one the command was given.
"""

from __future__ import annotations

from typing import Any

from mcp.server import Server, ServerRequestContext
from mcp.server.connection import Connection
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_REQUEST,
    CallToolRequestParams,
    CallToolResult,
    EmptyResult,
    ListResourcesResult,
    ListResourceTemplatesResult,
    ListToolsResult,
    PaginatedRequestParams,
    ReadResourceRequestParams,
    ReadResourceResult,
    SubscribeRequestParams,
    UnsubscribeRequestParams,
)
from starlette.requests import Request

from steerable.service.http._context import Context
from steerable.service.http.mcp import _resources as r
from steerable.service.http.mcp._tools import call_tool, tools

__all__ = ["SESSION_HEADER", "build_server"]

SESSION_HEADER = "mcp-session-id"
"""The streamable HTTP transport's connection id: whose subscriptions are whose."""

Ctx = ServerRequestContext[Any, Any]
_FOLLOWED = "steerable.followed"
"""Set in an MCP connection's state once its end stops its followers."""


def build_server(
    context: Context, followers: r.Followers, *, tenant: str | None = None
) -> Server[Any]:
    """The MCP server over ``context``; ``tenant``: the one tenant of a stdio server."""

    def request_of(ctx: Ctx) -> Request:
        request = ctx.request
        if isinstance(request, Request) and isinstance(request.scope.get("tenant"), str):
            return request
        if tenant is not None:  # stdio: the command's tenant, as the gate would set it
            return Request({"type": "http", "tenant": tenant, "headers": []})
        raise MCPError(INVALID_REQUEST, "no tenant for this request")

    def connection_of(ctx: Ctx) -> str:
        request = ctx.request
        if isinstance(request, Request):
            return request.headers.get(SESSION_HEADER, "")
        return "stdio"

    async def list_tools(ctx: Ctx, params: PaginatedRequestParams | None) -> ListToolsResult:
        return ListToolsResult(tools=tools())

    async def on_call_tool(ctx: Ctx, params: CallToolRequestParams) -> CallToolResult:
        return await call_tool(context, request_of(ctx), params.name, params.arguments)

    async def list_resources(
        ctx: Ctx, params: PaginatedRequestParams | None
    ) -> ListResourcesResult:
        return await r.list_resources(context, request_of(ctx))

    async def list_templates(
        ctx: Ctx, params: PaginatedRequestParams | None
    ) -> ListResourceTemplatesResult:
        return r.templates()

    async def read(ctx: Ctx, params: ReadResourceRequestParams) -> ReadResourceResult:
        return await r.read_resource(context, request_of(ctx), params.uri)

    async def subscribe(ctx: Ctx, params: SubscribeRequestParams) -> EmptyResult:
        session = ctx.session  # its notifications go on the connection's own stream
        connection = connection_of(ctx)
        await followers.subscribe(
            request_of(ctx), connection, params.uri, session.send_resource_updated
        )
        # Its notifications never fail once the MCP session is gone (DELETE, idle timeout,
        # stdio closed): the session's end must stop its followers, or each would follow
        # and hold one of the tenant's streams until the process exits. mcp 2.3.0 gives a
        # low-level handler no public way to the connection, whose exit stack is that end.
        mcp_connection = getattr(session, "_connection", None)
        if isinstance(mcp_connection, Connection) and not mcp_connection.state.get(_FOLLOWED):
            mcp_connection.state[_FOLLOWED] = True
            mcp_connection.exit_stack.callback(followers.drop, connection)
        return EmptyResult()

    async def unsubscribe(ctx: Ctx, params: UnsubscribeRequestParams) -> EmptyResult:
        followers.unsubscribe(connection_of(ctx), params.uri)
        return EmptyResult()

    return Server(
        "steerable",
        instructions=(
            "Sessions of a steerable service: send starts a turn, steer adds to the running"
            " turn at its next step (exactly once), stop ends it; read or subscribe to"
            f" {r.TEMPLATE} to follow it."
        ),
        on_list_tools=list_tools,
        on_call_tool=on_call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=read,
        on_subscribe_resource=subscribe,
        on_unsubscribe_resource=unsubscribe,
    )
