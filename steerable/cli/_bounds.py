"""The bounds of ``steerable serve``, as flags: the queue of a session, a tenant's rate and
streams, the timeouts of a connection, the connections at once, and the stop poll.

Each has a default a demanding operator would pick for one replica; ``0`` turns off the
ones that may be off. They go to :class:`~steerable.service.Service` (the queue, the stop
poll), to :func:`~steerable.service.http.create_app` (the tenants, the body's timeout) and
to uvicorn (the head's and keep-alive's timeouts, the connections).
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

from steerable.errors import UsageError

__all__ = ["Bounds", "add_bound_flags", "bounds_of"]


@dataclass(frozen=True, slots=True)
class Bounds:
    """The checked bounds (None: no bound)."""

    max_waiting: int | None = 1000
    tenant_rate: float | None = 100.0
    tenant_burst: int = 200
    tenant_streams: int | None = 100
    body_timeout: float = 30.0
    head_timeout: float = 10.0
    keep_alive: float = 5.0
    max_connections: int | None = 1000
    stop_poll: float = 0.2
    held_messages: int = 100_000


_DEFAULT = Bounds()


def add_bound_flags(parser: argparse.ArgumentParser) -> None:
    """The bounds' flags on ``serve``."""
    group = parser.add_argument_group("bounds (0 turns off those marked *)")
    flag = group.add_argument
    flag(
        "--max-waiting",
        type=int,
        default=_DEFAULT.max_waiting,
        help="* inputs waiting in one session before more are 429 queue_full (default: 1000)",
    )
    flag(
        "--tenant-rate",
        type=float,
        default=_DEFAULT.tenant_rate,
        help="* inputs a second one tenant may send to this replica, else 429 (default: 100)",
    )
    flag(
        "--tenant-burst",
        type=int,
        default=_DEFAULT.tenant_burst,
        help="inputs a tenant may send at once above its rate (default: 200)",
    )
    flag(
        "--tenant-streams",
        type=int,
        default=_DEFAULT.tenant_streams,
        help="* event streams one tenant may hold open on this replica (default: 100)",
    )
    flag(
        "--body-timeout",
        type=float,
        default=_DEFAULT.body_timeout,
        help="seconds a request body may stall before a 408 (default: 30)",
    )
    flag(
        "--head-timeout",
        type=float,
        default=_DEFAULT.head_timeout,
        help="seconds a connection may take to send a request's head (default: 10)",
    )
    flag(
        "--keep-alive",
        type=float,
        default=_DEFAULT.keep_alive,
        help="seconds an idle keep-alive connection is kept (default: 5)",
    )
    flag(
        "--max-connections",
        type=int,
        default=_DEFAULT.max_connections,
        help="* connections at once; beyond them uvicorn answers 503 (default: 1000)",
    )
    flag(
        "--stop-poll",
        type=float,
        default=_DEFAULT.stop_poll,
        help="seconds between asks of the store for stops, where it has no notifications"
        " (default: 0.2)",
    )
    flag(
        "--held-messages",
        type=int,
        default=_DEFAULT.held_messages,
        help="messages of the sessions it served a replica keeps, so its next claim of one"
        " reads only what is new (0: none; default: 100000)",
    )


def _count(value: int, flag: str) -> int | None:
    if value < 0:
        raise UsageError(f"{flag} is a count >= 0 (0: no bound), not {value}")
    return value or None


def _seconds(value: float, flag: str) -> float:
    if not (math.isfinite(value) and value > 0):
        raise UsageError(f"{flag} is a number of seconds > 0, not {value}")
    return value


def bounds_of(args: argparse.Namespace) -> Bounds:
    """The bounds the flags ask for, checked (one line naming the flag if not)."""
    rate = args.tenant_rate
    if not (math.isfinite(rate) and rate >= 0):
        raise UsageError(f"--tenant-rate is a number >= 0 (0: no bound), not {rate}")
    if args.tenant_burst < 1:
        raise UsageError(f"--tenant-burst is a count >= 1, not {args.tenant_burst}")
    return Bounds(
        max_waiting=_count(args.max_waiting, "--max-waiting"),
        tenant_rate=rate or None,
        tenant_burst=args.tenant_burst,
        tenant_streams=_count(args.tenant_streams, "--tenant-streams"),
        body_timeout=_seconds(args.body_timeout, "--body-timeout"),
        head_timeout=_seconds(args.head_timeout, "--head-timeout"),
        keep_alive=_seconds(args.keep_alive, "--keep-alive"),
        max_connections=_count(args.max_connections, "--max-connections"),
        stop_poll=_seconds(args.stop_poll, "--stop-poll"),
        held_messages=_held(args.held_messages),
    )


def _held(value: int) -> int:
    if value < 0:
        raise UsageError(f"--held-messages is a count >= 0 (0: none), not {value}")
    return value
