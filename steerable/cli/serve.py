"""``steerable serve`` and ``steerable migrate``: the service over HTTP, and its database.

``steerable serve --store URL`` makes this process one replica of the service: it serves
turns with ``--agent`` (the keyless demo agent by default) and answers the HTTP API of
:func:`steerable.service.http.create_app` with uvicorn. Run as many as you like over one
database. Without ``--tokens`` it serves one tenant with no authentication, so it listens on
a loopback address only unless ``--insecure-no-auth`` says otherwise.

The server never migrates its database: ``steerable migrate --store URL`` applies the
pending steps (run it once per release, from a deploy job), and ``serve`` refuses a
database whose schema is not the one it reads, naming the command.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from steerable.errors import SteerableError, StoreError, UsageError

if TYPE_CHECKING:
    from steerable.service import Agent

__all__ = ["ServeOptions", "add_parsers", "load_agent", "load_tokens", "migrate", "serve"]

DEFAULT_AGENT = "steerable.service.demo:demo_agent"


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """What ``steerable serve`` was asked for, checked."""

    store: str
    agent: Agent
    host: str
    port: int
    replica: str | None
    tokens: dict[str, str] | None
    lease: float
    poll: float


def _fail(command: str, message: str, code: int = 2) -> int:
    # One line (two at most): a flag's mistake is no traceback.
    print(f"steerable {command}: {message}", file=sys.stderr)
    return code


def load_tokens(path: str) -> dict[str, str]:
    """The token -> tenant map in ``path``: a JSON object, or one ``token tenant`` a line.

    Blank lines and lines starting with ``#`` are skipped. A tenant is 1 to 64 of
    ``A-Z a-z 0-9 _ . -``; a token is given once.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--tokens {path}: cannot read it ({exc})") from None
    pairs: list[tuple[object, object]]
    if text.lstrip().startswith("{"):
        try:
            loaded = json.loads(text)
        except ValueError as exc:
            raise UsageError(f"--tokens {path}: not valid JSON ({exc})") from None
        if not isinstance(loaded, dict):
            raise UsageError(f"--tokens {path}: a JSON object of token: tenant")
        pairs = list(loaded.items())
    else:
        pairs = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            fields = line.split()
            if len(fields) != 2:
                raise UsageError(f"--tokens {path}:{number}: one `token tenant` a line")
            pairs.append((fields[0], fields[1]))
    return _checked_tokens(path, pairs)


def _checked_tokens(path: str, pairs: list[tuple[object, object]]) -> dict[str, str]:
    # The rules of the service and its client, so a token taken here is one they take.
    from steerable.service.client import check_token
    from steerable.service.http._problems import TENANT

    tokens: dict[str, str] = {}
    for token, tenant in pairs:
        try:
            token = check_token(token)
        except UsageError as exc:
            raise UsageError(f"--tokens {path}: {exc}") from None
        if not isinstance(tenant, str) or not TENANT.fullmatch(tenant):
            raise UsageError(
                f"--tokens {path}: a tenant is 1-64 of A-Z a-z 0-9 _ . -, not {tenant!r:.80}"
            )
        if token in tokens:
            raise UsageError(f"--tokens {path}: a token is given twice (tenant {tenant!r})")
        tokens[token] = tenant
    if not tokens:
        raise UsageError(f"--tokens {path}: no tokens in it")
    return tokens


def load_agent(spec: str) -> Agent:
    """The agent ``module:attribute`` names (a dotted module or a ``.py`` path).

    The attribute is an agent (``run_turn`` and ``steers_per_turn``), or a function of no
    arguments that makes one.
    """
    from steerable.cli.chat import _import

    where, colon, name = spec.rpartition(":")
    if not colon or not where or not name:
        raise UsageError(
            f"--agent takes module:attribute, like examples.agents.two_tools:AGENT, not {spec!r}"
        )
    try:
        module = _import(where)
    except Exception as exc:  # the user's module: what it raised, in one line
        raise UsageError(
            f"--agent {spec}: cannot import {where!r}: {type(exc).__name__}: {exc}"
        ) from None
    try:
        value: Any = getattr(module, name)
    except AttributeError:
        raise UsageError(f"--agent {spec}: {where!r} has no attribute {name!r}") from None
    if not _is_agent(value) and callable(value):
        try:
            value = value()
        except Exception as exc:  # the user's factory: say what it raised, in one line
            raise UsageError(f"--agent {spec}: {type(exc).__name__}: {exc}") from None
    if not _is_agent(value):
        raise UsageError(
            f"--agent {spec}: {value!r:.80} is not an agent (run_turn(turn) and steers_per_turn)"
        )
    agent: Agent = value
    return agent


def _is_agent(value: object) -> bool:
    return callable(getattr(value, "run_turn", None)) and hasattr(value, "steers_per_turn")


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything


def _options(args: argparse.Namespace) -> ServeOptions:
    tokens = None if args.tokens is None else load_tokens(args.tokens)
    if tokens is None and not _loopback(args.host) and not args.insecure_no_auth:
        raise UsageError(
            f"--host {args.host} without --tokens would serve anyone with no auth;"
            " give --tokens FILE, or --insecure-no-auth if that is what you want"
        )
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port is from 0 to 65535, not {args.port}")
    for flag, value in (("--lease", args.lease), ("--poll", args.poll)):
        if not value > 0:
            raise UsageError(f"{flag} is a number of seconds > 0, not {value}")
    return ServeOptions(
        store=args.store,
        agent=load_agent(args.agent),
        host=args.host,
        port=args.port,
        replica=args.replica_id,
        tokens=tokens,
        lease=args.lease,
        poll=args.poll,
    )


def serve(args: argparse.Namespace) -> int:
    """Serve turns and the HTTP API over the store ``--store`` names, until interrupted."""
    try:  # first: the tokens' rules are the service's own
        import uvicorn

        import steerable.service.http  # noqa: F401 - a missing extra is told here
    except ImportError as exc:
        return _fail("serve", f"{exc} (pip install 'steerable[serve]')")
    try:
        options = _options(args)
    except UsageError as exc:
        return _fail("serve", str(exc))
    try:
        return asyncio.run(_serve(options, uvicorn))
    except KeyboardInterrupt:
        return 0
    except UsageError as exc:
        return _fail("serve", str(exc))
    except (StoreError, OSError) as exc:
        return _fail("serve", f"{type(exc).__name__}: {exc}", 1)


async def _serve(options: ServeOptions, uvicorn: Any) -> int:
    from steerable.service import Service
    from steerable.service.http import create_app, live_feed
    from steerable.stores.migrations import check_schema
    from steerable.stores.url import open_url

    async with open_url(options.store) as store:
        try:
            await check_schema(store)
        except StoreError as exc:
            raise StoreError(f"{exc}; run `steerable migrate --store URL` first") from None
        feed = live_feed(store)
        service = Service(
            store,
            options.agent,
            replica=options.replica,
            lease=options.lease,
            poll=options.poll,
            live=feed.sink,
        )
        # The app's lifespan serves turns (service.serving()) and runs the live feed.
        app = create_app(service, tokens=options.tokens, live=feed)
        config = uvicorn.Config(
            app, host=options.host, port=options.port, log_level="info", lifespan="on"
        )
        server = uvicorn.Server(config)
        await server.serve()
    return 0 if server.started else 1


def migrate(args: argparse.Namespace) -> int:
    """Apply the pending migrations of the database ``--store`` names; say which."""
    from steerable.stores.url import migrate_url

    scheme = str(args.store).partition(":")[0].lower()
    try:
        applied = asyncio.run(migrate_url(args.store))
    except UsageError as exc:
        return _fail("migrate", str(exc))
    except (SteerableError, OSError) as exc:
        return _fail("migrate", f"{type(exc).__name__}: {exc}", 1)
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
    run.add_argument(
        "--agent",
        default=DEFAULT_AGENT,
        metavar="MODULE:ATTRIBUTE",
        help="the agent turns run, or a function making it (default: the keyless demo agent)",
    )
    run.add_argument("--host", default="127.0.0.1", help="the address to listen on")
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
