"""The ``steerable`` command. The one place in steerable that starts an event loop.

``steerable demo`` runs the three-replica example (:mod:`steerable.cli.demo`);
``steerable chat`` talks to an agent in the terminal (:mod:`steerable.cli.chat`);
``steerable serve`` and ``steerable migrate`` run the service over HTTP and set up its
database (:mod:`steerable.cli.serve`).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from steerable import __doc__ as _about
from steerable.cli.demo import demo
from steerable.cli.mcp import add_parser as add_mcp_parser
from steerable.cli.serve import add_parsers

__all__ = ["main", "parser"]


def chat(args: argparse.Namespace) -> int:
    """Chat with an agent in the terminal, on a session in a SQLite file or of a service
    (``--url``); type while it works to steer it."""
    import asyncio

    from steerable.cli.chat import ChatOptions
    from steerable.cli.chat import chat as run_chat
    from steerable.cli.chat_url import chat_url

    if args.url is not None:
        token = args.token or os.environ.get("STEERABLE_TOKEN")
        return asyncio.run(chat_url(args.url, args.session, token=token))

    options = ChatOptions(
        store=Path(args.store),
        session=args.session,
        model=args.model,
        base_url=args.base_url,
        tools=tuple(args.tools or ()),
        instructions=args.instructions,
        max_steps=args.max_steps,
        tool_choice=args.tool_choice,
        stream=not args.no_stream,
        max_tokens=args.max_tokens,
        temperature=args.temperature,
    )
    return asyncio.run(run_chat(options))


def parser() -> argparse.ArgumentParser:
    """The command line: one subcommand per verb."""
    top = argparse.ArgumentParser(
        prog="steerable",
        description=(_about or "").strip().splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = top.add_subparsers(dest="command", metavar="COMMAND")
    run_demo = commands.add_parser(
        "demo",
        help="three replicas over one SQLite file: steer, SIGKILL, resume (no API key)",
        description=demo.__doc__,
    )
    run_demo.add_argument("--database", help="the SQLite file to use (default: a temporary one)")
    run_demo.set_defaults(handler=demo)
    _chat_parser(commands)
    add_parsers(commands)
    add_mcp_parser(commands)
    return top


def _chat_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run_chat = commands.add_parser(
        "chat",
        help="chat with an agent in the terminal; type while it works to steer it",
        description=chat.__doc__,
    )
    run_chat.add_argument("--session", default="chat", help="the session's id (default: chat)")
    run_chat.add_argument(
        "--store", default="steerable-chat.db", help="the SQLite file (default: steerable-chat.db)"
    )
    run_chat.add_argument(
        "--model", help="provider:model, like openai:gpt-5-mini (default: $STEERABLE_MODEL)"
    )
    run_chat.add_argument(
        "--base-url",
        help="a compatible server (default: $OPENAI_BASE_URL), with an openai:, openai-chat:"
        " or openai-responses: model",
    )
    run_chat.add_argument(
        "--tools",
        action="append",
        metavar="MODULE:ATTRIBUTE",
        help="a list of tools to give the agent (repeatable), like examples.tools.slow:TOOLS",
    )
    run_chat.add_argument("--instructions", help="the system prompt")
    run_chat.add_argument("--max-steps", type=int, default=32, help="model requests per turn")
    run_chat.add_argument(
        "--tool-choice",
        choices=("auto", "required", "none"),
        help="Chat Completions' tool_choice, sent with the tools (default: auto)",
    )
    run_chat.add_argument(
        "--max-tokens",
        type=_positive_int,
        metavar="N",
        help="the most tokens a reply may take (default: the server's)",
    )
    run_chat.add_argument(
        "--temperature",
        type=_temperature,
        metavar="T",
        help="the sampling temperature, 0 to 2 (default: the server's)",
    )
    run_chat.add_argument(
        "--no-stream",
        action="store_true",
        help="ask for whole replies, for servers that cannot stream tool calls",
    )
    run_chat.add_argument(
        "--url",
        help="chat on a session of a service (steerable serve) instead: http://host:port",
    )
    run_chat.add_argument(
        "--token", help="the service's bearer token, with --url (default: $STEERABLE_TOKEN)"
    )
    run_chat.set_defaults(handler=chat)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``steerable`` command."""
    args = parser().parse_args(argv)
    if getattr(args, "handler", None) is None:
        parser().print_help()
        return 2
    code: int = args.handler(args)
    return code


if __name__ == "__main__":
    sys.exit(main())


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"a whole number of tokens, 1 or more, not {text!r}")
    return value


def _temperature(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value <= 2:
        raise argparse.ArgumentTypeError(f"a number from 0 to 2, not {text!r}")
    return value
