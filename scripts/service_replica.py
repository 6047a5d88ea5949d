"""One replica process of the service, for the process tests, the chaos script and benchmarks.

    python scripts/service_replica.py --store URL --replica NAME [--lease S] [--seconds S] ...

It serves turns with the keyless demo agent (:mod:`steerable.service.demo`) and also takes
commands, one JSON object per line on stdin, answering one JSON line each on stdout, so a
test can send, steer and stop *through this replica*::

    {"op": "send", "session": "s", "text": "hi", "id": "x"}   -> {"ok": true, "result": {...}}
    {"op": "steer" | "stop" | "status" | "input" | "turn" | "counters", ...}
    {"op": "fate", "session": "s", "id": "k", "seconds": 10}  -> the input once its fate is known

``--agent MODULE:NAME`` serves another agent instead: ``NAME(args)`` gets this script's parsed
arguments (``replica``, ``requests``, ``seconds``, ...) and returns the agent (the framework
integrations' process tests use it).

It prints ``{"ready": true, "replica": NAME}`` once it serves. With ``--requests FILE`` every
model request it makes is appended to FILE as a JSON line (``replica``, ``turn``: the id of the
turn's prompt, and each
message's ``id``, ``role``, ``text``, ``steered``, ``result``: whether it holds tool results).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib
import json
import os
import sys
from collections.abc import Callable
from typing import Any

from steerable.errors import SteerableError
from steerable.models.base import ModelRequest
from steerable.service import Agent, Service
from steerable.service.demo import demo_agent, turn_of_request
from steerable.stores.url import open_url


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True, help="a store URL (steerable.stores.url)")
    parser.add_argument("--replica", required=True, help="this replica's name in leases")
    parser.add_argument("--lease", type=float, default=2.0, help="lease seconds")
    parser.add_argument("--renew-every", type=float, default=None, help="renewal seconds")
    parser.add_argument("--poll", type=float, default=0.2, help="idle poll seconds")
    parser.add_argument("--seconds", type=float, default=0.5, help="the work tool's seconds")
    parser.add_argument("--calls", type=int, default=1, help="tool calls per turn")
    parser.add_argument("--blocking", action="store_true", help="a sync tool in a thread")
    parser.add_argument("--model-delay", type=float, default=0.0, help="seconds per reply")
    parser.add_argument("--steers-per-turn", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--requests", default=None, help="append model requests to FILE")
    parser.add_argument("--agent", default=None, help="MODULE:NAME, NAME(args) gives the agent")
    return parser.parse_args()


def _agent(args: argparse.Namespace) -> Agent:
    if args.agent is not None:
        module, _, name = args.agent.partition(":")
        factory: Callable[[argparse.Namespace], Agent] = getattr(
            importlib.import_module(module), name
        )
        return factory(args)
    return demo_agent(
        calls=args.calls,
        seconds=args.seconds,
        blocking=args.blocking,
        delay=args.model_delay,
        steers_per_turn=args.steers_per_turn,
        record=_recorder(args.requests, args.replica),
    )


def _recorder(path: str | None, replica: str) -> Any:
    if path is None:
        return None

    def record(request: ModelRequest) -> None:
        mine = turn_of_request(request.messages)
        line = {
            "replica": replica,
            "turn": mine[0].id if mine else None,
            "messages": [
                {
                    "id": m.id,
                    "role": m.role,
                    "text": m.text,
                    "steered": m.steered,
                    "result": bool(m.tool_results),
                }
                for m in request.messages
            ],
        }
        with open(path, "a", encoding="utf-8") as file:  # one line per write: atomic append
            file.write(json.dumps(line) + "\n")

    return record


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


async def _command(service: Service, line: str) -> dict[str, Any]:
    try:
        command = json.loads(line)
        op, session = command["op"], command.get("session", "")
        if op == "send":
            result: Any = await service.send(session, command["text"], id=command.get("id"))
        elif op == "steer":
            result = await service.steer(session, command["text"], id=command.get("id"))
        elif op == "stop":
            result = await service.stop(session)
        elif op == "status":
            result = await service.status(session)
        elif op == "input":
            result = await service.input(session, command["id"])
        elif op == "turn":
            result = await service.turn(session, command["id"])
        elif op == "fate":  # answers once decided, or after "seconds" (this pipe waits)
            seconds = float(command.get("seconds", 10.0))
            result = await service.fate(session, command["id"], seconds=seconds)
        elif op == "counters":
            result = service.replica.counters if service.replica else None
        else:
            return {"ok": False, "error": f"unknown op {op!r}"}
    except (SteerableError, KeyError, ValueError) as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    return {"ok": True, "result": _plain(result)}


async def _commands(service: Service) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        answer = await _command(service, line.decode())
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


async def main() -> None:
    """Serve until stdin closes (or the process is killed)."""
    args = _arguments()
    agent = _agent(args)
    async with open_url(args.store) as store:
        service = Service(
            store,
            agent,
            replica=args.replica,
            lease=args.lease,
            renew_every=args.renew_every,
            poll=args.poll,
            concurrency=args.concurrency,
        )
        async with service.serving():
            print(json.dumps({"ready": True, "replica": args.replica, "pid": os.getpid()}))
            sys.stdout.flush()
            await _commands(service)


if __name__ == "__main__":
    asyncio.run(main())
