"""``steerable mcp``: the service's MCP server over stdio, for desktop clients.

``steerable mcp --store URL`` speaks MCP on stdin and stdout (the tools send, steer, stop,
status, wait and transcript; the sessions and transcripts as resources): a desktop client
(Claude Desktop, an IDE) starts it as its server. Its sessions are those of the tenant
``--tenant`` (``default``, the API's one tenant without tokens), the same the HTTP API and
``/v1/mcp`` see for that tenant. With ``--agent MODULE:NAME`` this process serves turns
too; without, it only sends and steers, and a ``steerable serve`` replica runs the turns.
A bad flag or an unusable database is one line on stderr and exit status 2 (1 when the
database is unusable); stdout carries nothing but MCP.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, NoReturn

from steerable.errors import UsageError

if TYPE_CHECKING:
    from steerable.service import Agent

__all__ = ["add_parser", "run_mcp"]

_MAX_TENANT = 100


def _fail(message: str, code: int = 2) -> int:
    print(f"steerable mcp: {message}", file=sys.stderr)
    return code


def _tenant(name: str) -> str:
    if not name or len(name) > _MAX_TENANT or "/" in name or not name.isprintable():
        raise UsageError(
            f"--tenant is a printable name without '/', of 1 to 100 characters: {name!r}"
        )
    return name


def run_mcp(args: argparse.Namespace) -> int:
    """Serve MCP over stdio until the client closes stdin."""
    from steerable.cli.serve import CannotStart, load_agent

    try:
        tenant = _tenant(args.tenant)
        agent = None if args.agent is None else load_agent(args.agent)
    except UsageError as exc:
        return _fail(str(exc))
    try:
        asyncio.run(_serve(args.store, agent, tenant))
    except UsageError as exc:
        return _fail(str(exc))
    except CannotStart as exc:
        return _fail(str(exc), 1)
    return 0


async def _serve(store_url: str, agent: Agent | None, tenant: str) -> None:
    from mcp.server.stdio import stdio_server

    from steerable.cli.serve import opened
    from steerable.service import Service
    from steerable.service.http import Limits, live_feed
    from steerable.service.http._context import Context
    from steerable.service.http._limits import TenantLimits
    from steerable.service.http.mcp import Followers, build_server

    async with AsyncExitStack() as stack:
        store = await stack.enter_async_context(opened(store_url))
        feed = live_feed(store)
        service = Service(store, agent, live=feed.sink, wake=getattr(feed, "wake", None))
        context = Context(service, feed, 15.0, 0.5, TenantLimits(Limits()))
        await stack.enter_async_context(feed.running())
        if agent is not None:
            await stack.enter_async_context(service.serving())
        followers = Followers(context)
        stack.push_async_callback(followers.close)
        server = build_server(context, followers, tenant=tenant)
        read, write = await stack.enter_async_context(stdio_server())
        await server.run(read, write, server.create_initialization_options())


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``mcp`` to the command line."""
    run = commands.add_parser(
        "mcp",
        help="the service's MCP server over stdio, for desktop clients",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("--store", required=True, help="sqlite:///file.db, postgresql://host/db, ...")
    run.add_argument(
        "--agent",
        metavar="MODULE:NAME",
        help="serve turns too, with this agent (default: none; another process serves them)",
    )
    run.add_argument(
        "--tenant", default="default", help="whose sessions these are (default: default)"
    )
    run.set_defaults(handler=run_mcp)

    def error(message: str) -> NoReturn:
        _fail(f"{message} (steerable mcp --help lists the flags)")
        raise SystemExit(2)

    setattr(run, "error", error)  # noqa: B010 - an instance's own, not the class's
