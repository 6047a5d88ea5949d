"""``steerable serve`` and ``steerable migrate``: the service over HTTP, and its database.

``steerable serve --store URL`` makes this process one replica of the service: it serves
turns with ``--agent`` (the keyless demo agent by default) and answers the HTTP API of
:func:`steerable.service.http.create_app` with uvicorn. Run as many as you like over one
database. Without ``--tokens`` it serves one tenant with no authentication, so it listens on
a loopback address only unless ``--insecure-no-auth`` says otherwise.

``--model provider:name`` serves steerable's own loop over a model instead, with the
chat's options and ``--tools MODULE:NAME``: no agent module needed (see ``_agents.py``).

The server never migrates its database: ``steerable migrate --store URL`` applies the
pending steps (run it once per release, from a deploy job), and ``serve`` refuses a
database whose schema is not the one it reads, naming the command. A database that cannot
be used (unreachable, not accepting connections yet, an unknown database, a refused login,
not migrated) is one line on stderr and exit status 1 (``_databases.py``).

A failed turn is logged with its traceback, and its tenant is told a code and a safe line
(``--error-detail`` passes the agent's own text, for development). ``--log-format json``
writes each log line as one JSON object; ``--metrics`` serves Prometheus metrics at
``/metrics`` (docs/observability.md); ``--protocol a2a|mcp|ag-ui`` (repeatable) speaks
that open protocol too, under ``/v1/`` behind the same tokens (docs/protocols.md). Every
queue, rate,
stream, timeout and connection count has a bound with a default (``_bounds.py``; ``serve
--help`` lists them). SIGTERM or Ctrl-C ends
the event streams, gives other requests ``--grace`` seconds, and releases the running
turns' leases for another replica to carry on (``_shutdown.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import ipaddress
import logging
import math
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NoReturn

from steerable._extras import PROTOCOLS
from steerable.cli._agents import DEFAULT_AGENT, add_agent_flags, agent_of, load_agent
from steerable.cli._bounds import Bounds, add_bound_flags, bounds_of
from steerable.cli._databases import explain
from steerable.cli._tokens import load_tokens
from steerable.errors import StoreError, UsageError

if TYPE_CHECKING:
    from steerable.models.registry import ProviderModel
    from steerable.service import Agent

__all__ = [
    "DEFAULT_AGENT",
    "ServeOptions",
    "add_parsers",
    "load_agent",
    "load_tokens",
    "migrate",
    "serve",
]


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """What ``steerable serve`` was asked for, checked.

    ``host`` is what uvicorn binds (an IPv6 address without its brackets); ``model`` the
    ``--model`` to close when serving ends (None with ``--agent``); ``metrics`` serves
    ``/metrics``; ``log_format`` is how log lines are written (``json``: one object a line);
    ``protocols`` the open protocols mounted beside the API.
    """

    store: str
    agent: Agent
    host: str
    port: int
    replica: str | None
    tokens: dict[str, str] | None
    lease: float
    poll: float
    grace: float = 5.0
    error_detail: bool = False
    model: ProviderModel | None = None
    cors_origins: tuple[str, ...] = ()
    bounds: Bounds = field(default_factory=Bounds)
    metrics: bool = False
    log_format: Literal["text", "json"] = "text"
    protocols: tuple[str, ...] = ()


class CannotStart(Exception):
    """The database cannot be used; the message says why in a line."""


def _fail(command: str, message: str, code: int = 2) -> int:
    # One line (two at most): a flag's mistake is no traceback.
    print(f"steerable {command}: {message}", file=sys.stderr)
    return code


def bind_host(host: str) -> str:
    """``--host`` as uvicorn binds it: ``[::1]`` (a URL's spelling) is ``::1``."""
    if not (host.startswith("[") or host.endswith("]")):
        return host
    inner = host[1:-1] if host.startswith("[") and host.endswith("]") else ""
    try:
        ipaddress.IPv6Address(inner)
    except ValueError:
        raise UsageError(
            f"--host {host}: brackets hold an IPv6 address, like [::1] or ::1"
        ) from None
    return inner


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything


def _options(args: argparse.Namespace) -> ServeOptions:
    tokens = None if args.tokens is None else load_tokens(args.tokens)
    host = bind_host(args.host)
    if tokens is None and not _loopback(host) and not args.insecure_no_auth:
        raise UsageError(
            f"--host {args.host} without --tokens would serve anyone with no auth;"
            " give --tokens FILE, or --insecure-no-auth if that is what you want"
        )
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port is from 0 to 65535, not {args.port}")
    for flag, value in (("--lease", args.lease), ("--poll", args.poll), ("--grace", args.grace)):
        if not (math.isfinite(value) and value > 0):
            raise UsageError(f"{flag} is a number of seconds > 0, not {value}")
    agent, model = agent_of(args)
    return ServeOptions(
        cors_origins=_origins(args.cors_origin or []),
        store=args.store,
        agent=agent,
        host=host,
        port=args.port,
        replica=args.replica_id,
        tokens=tokens,
        lease=args.lease,
        poll=args.poll,
        grace=args.grace,
        error_detail=args.error_detail,
        model=model,
        bounds=bounds_of(args),
        metrics=args.metrics,
        log_format=args.log_format,
        protocols=tuple(dict.fromkeys(args.protocol or [])),
    )


def _origins(flags: list[str]) -> tuple[str, ...]:
    if not flags:
        return ()
    from steerable.service.http._edge import check_origins

    try:
        return tuple(check_origins(flags))
    except UsageError:
        raise UsageError(
            "--cors-origin is an origin, scheme://host[:port] with no path (or * alone for any)"
        ) from None


def serve(args: argparse.Namespace) -> int:
    """Serve turns and the HTTP API over the store ``--store`` names, until interrupted."""
    try:  # first: the tokens' rules are the service's own
        import uvicorn  # noqa: F401

        import steerable.service.http  # noqa: F401 - a missing extra is told here
    except ImportError as exc:
        return _fail("serve", f"{exc} (pip install 'steerable[serve]')")
    if args.metrics:
        try:  # the extra is told here, before anything opens
            importlib.import_module("steerable.service.http._metrics")
        except ImportError as exc:
            return _fail("serve", f"--metrics: {exc}")
    for name in dict.fromkeys(args.protocol or []):
        module_name, extra = PROTOCOLS[name]
        try:  # a missing extra is one line, before anything opens
            importlib.import_module(module_name)
        except ImportError as exc:
            return _fail("serve", f"--protocol {name}: {exc} (pip install 'steerable[{extra}]')")
    try:
        options = _options(args)
    except UsageError as exc:
        return _fail("serve", str(exc))
    try:
        return asyncio.run(_serve(options))
    except KeyboardInterrupt:
        return 0
    except UsageError as exc:
        return _fail("serve", str(exc))
    except CannotStart as exc:
        return _fail("serve", str(exc), 1)
    except (StoreError, OSError) as exc:
        return _fail("serve", f"{type(exc).__name__}: {exc}", 1)


@asynccontextmanager
async def opened(url: str) -> AsyncIterator[Any]:
    """The store ``url`` names, its schema checked; :class:`CannotStart` says why not."""
    from steerable.stores.migrations import SchemaVersioned, check_schema
    from steerable.stores.url import open_url

    async with AsyncExitStack() as stack:
        try:  # connecting: pools of some drivers connect only at the first call
            store = await stack.enter_async_context(open_url(url))
            if isinstance(store, SchemaVersioned):
                await store.schema_version()
        except UsageError:
            raise
        except Exception as exc:
            line = explain(exc, url)
            if line is None:
                raise
            raise CannotStart(line) from None
        try:
            await check_schema(store)
        except StoreError as exc:
            raise CannotStart(explain(exc, url, schema=True) or str(exc)) from None
        yield store


async def _serve(options: ServeOptions) -> int:
    from steerable.cli._shutdown import EndingStreams, Server
    from steerable.service import Service
    from steerable.service.http import Limits, create_app, live_feed

    _log_to_stderr(options.log_format)
    bounds = options.bounds
    async with AsyncExitStack() as stack:
        if options.model is not None:
            await stack.enter_async_context(options.model)
        store = await stack.enter_async_context(opened(options.store))
        feed = live_feed(store)
        service = Service(
            store,
            options.agent,
            replica=options.replica,
            lease=options.lease,
            poll=options.poll,
            live=feed.sink,
            error_detail=options.error_detail,
            max_waiting=bounds.max_waiting,
            stop_poll=bounds.stop_poll,
            held_messages=bounds.held_messages,
        )
        limits = Limits(bounds.tenant_rate, bounds.tenant_burst, bounds.tenant_streams)
        # The app's lifespan serves turns (service.serving()) and runs the live feed.
        app = create_app(
            service,
            tokens=options.tokens,
            live=feed,
            cors_origins=options.cors_origins,
            limits=limits,
            body_timeout=bounds.body_timeout,
            metrics=options.metrics,
            protocols=options.protocols,
        )
        streams = EndingStreams(app)
        config = uvicorn_config(streams, options)
        server = Server(config, streams)
        await server.serve()
    return 0 if server.started else 1


def uvicorn_config(app: Any, options: ServeOptions) -> Any:
    """uvicorn's settings for ``app``: the address, the grace of a shutdown, the bounds of
    a connection (its head's and keep-alive's timeouts, how many at once)."""
    import uvicorn

    from steerable.cli._protocol import guarded_h11

    bounds = options.bounds
    logs: dict[str, Any] = {} if options.log_format == "text" else {"log_config": None}
    return uvicorn.Config(
        app,
        host=options.host,
        port=options.port,
        log_level="info",
        **logs,  # json: uvicorn's lines go to the root's handler, as JSON (_log_to_stderr)
        lifespan="on",
        http=guarded_h11(bounds.head_timeout),
        # typed int, but each is a loop timer's seconds: a fraction works
        timeout_graceful_shutdown=options.grace,  # type: ignore[arg-type]
        timeout_keep_alive=bounds.keep_alive,  # type: ignore[arg-type]
        limit_concurrency=bounds.max_connections,
    )


def _log_to_stderr(log_format: Literal["text", "json"] = "text") -> None:
    """steerable's log lines (a failed turn's traceback among them) beside uvicorn's, each
    with the ``request_id`` of the request it was written for (a field of the JSON).

    ``json``: every line on stderr is one JSON object, uvicorn's and any library's warnings
    too (the handler is the root's; steerable and uvicorn log from INFO, the rest from
    WARNING).
    """
    from steerable._logs import JsonFormatter, RequestIdFilter

    logger = logging.getLogger("steerable")
    root = logging.getLogger()
    if logger.handlers or root.handlers:
        return  # the embedding program has its own
    handler = logging.StreamHandler()
    handler.addFilter(RequestIdFilter())
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
        root.addHandler(handler)
        logging.getLogger("uvicorn").setLevel(logging.INFO)
    else:
        handler.setFormatter(logging.Formatter("%(levelname)s:  %(name)s: %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)


def migrate(args: argparse.Namespace) -> int:
    """Apply the pending migrations of the database ``--store`` names; say which."""
    from steerable.stores.url import migrate_url

    scheme = str(args.store).partition(":")[0].lower()
    try:
        applied = asyncio.run(migrate_url(args.store))
    except UsageError as exc:
        return _fail("migrate", str(exc))
    except Exception as exc:
        line = explain(exc, args.store)
        if line is None:
            raise
        return _fail("migrate", line, 1)
    if scheme in ("memory", "sqlite"):
        print(f"{scheme}: nothing to apply (it sets up its own tables)")
    elif applied:
        print(f"applied migration step(s) {', '.join(map(str, applied))}")
    else:
        print("up to date: nothing to apply")
    return 0


def add_parsers(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``serve`` and ``migrate`` to the command line."""
    run = commands.add_parser(
        "serve",
        help="serve the service over HTTP: one replica over a store URL",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("--store", required=True, help="sqlite:///file.db, postgresql://host/db, ...")
    add_agent_flags(run)
    run.add_argument(
        "--host", default="127.0.0.1", help="the address to listen on (IPv6: ::1 or [::1])"
    )
    run.add_argument("--port", type=int, default=8000, help="the port (default: 8000)")
    run.add_argument("--replica-id", help="this replica's name in leases (default: host:pid)")
    run.add_argument("--tokens", metavar="FILE", help="token -> tenant: `token tenant` a line")
    run.add_argument(
        "--insecure-no-auth",
        action="store_true",
        help="listen on a non-loopback --host without --tokens (anyone may call it)",
    )
    run.add_argument("--lease", type=float, default=15.0, help="lease seconds (default: 15)")
    run.add_argument("--poll", type=float, default=1.0, help="idle poll seconds (default: 1)")
    run.add_argument(
        "--grace",
        type=float,
        default=5.0,
        help="on SIGTERM, seconds for requests under way to finish (default: 5); event"
        " streams end at once, running turns go to another replica",
    )
    run.add_argument(
        "--error-detail",
        action="store_true",
        help="tell the tenant a failed turn's own error text (for development; by default a"
        " code and a safe line, the text going to the log)",
    )
    run.add_argument(
        "--cors-origin",
        action="append",
        metavar="ORIGIN",
        help="let browser pages of ORIGIN (https://app.example) call the API; repeat for more,"
        " or * for any (default: none)",
    )
    run.add_argument(
        "--metrics",
        action="store_true",
        help="serve Prometheus metrics at /metrics, with no token: no tenant's data is in"
        " them (pip install 'steerable[metrics]')",
    )
    run.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="text lines, or one JSON object a line with every field (default: text)",
    )
    run.add_argument(
        "--protocol",
        action="append",
        choices=tuple(PROTOCOLS),
        metavar="NAME",
        help="speak an open protocol too, under /v1/ behind the same tokens: a2a, mcp or ag-ui;"
        " repeat for more (each its own extra: pip install 'steerable[a2a]', ...)",
    )
    add_bound_flags(run)
    run.set_defaults(handler=serve)
    _short_errors(run, "serve")
    apply = commands.add_parser(
        "migrate",
        help="apply the pending migrations of a server database",
        description=migrate.__doc__,
    )
    apply.add_argument("--store", required=True, help="postgresql://host/db, mysql://..., ...")
    apply.set_defaults(handler=migrate)
    _short_errors(apply, "migrate")


def _short_errors(parser: argparse.ArgumentParser, command: str) -> None:
    """A bad flag is one line (argparse would print the whole usage first)."""

    def error(message: str) -> NoReturn:
        _fail(command, f"{message} (steerable {command} --help lists the flags)")
        raise SystemExit(2)

    setattr(parser, "error", error)  # noqa: B010 - an instance's own, not the class's
