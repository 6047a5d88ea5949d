"""A replica's store calls per second while it holds many running turns (issue 24, "Leases
at scale").

One replica (a :class:`~steerable.service.Service` in this process) serves N sessions, each
turn calling one tool that waits for the whole measurement (a slow tool or model), so the
replica does nothing but hold the turns. Over a window of ``--window`` seconds every store
call it makes is counted, by verb, with the process's CPU time. Two ways to renew:

- **together** (the replica as it is): one ``renew_many`` call per ``renew_every`` for every
  lease it holds, at most ``RENEW_BATCH`` (100) a call;
- **per turn** (before): the same replica over a store whose ``renew_many`` makes one
  ``renew`` per lease, all at once: the calls the replica made when each turn had a renewal
  task of its own.

The lease is ``--lease`` seconds (3 s: renewed every 1 s; the service's default is 15 s,
renewed every 5 s, where the per-turn renewals are a fifth of these per second). On SQLite
and MariaDB, which do not notify, the replica also polls ``stopping`` every 0.2 s; on
Postgres it listens for hints instead. "Per turn" runs its renewals of one interval at once
and the next interval starts when the last has answered, where each per-turn task started
its own after its own answer: the same calls per interval, give or take a round's length.
Each point runs on a fresh SQLite file or server database.

``python -m bench.leases`` (SQLite, Postgres and MariaDB; 10 and 1,000 turns; about three
minutes here); ``--quick`` (SQLite, 10 and 100 turns, a 0.9 s lease: seconds); ``--json``
(one JSON line of the figures at the end).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sqlite3
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench._common import machine, table
from bench._servers import (
    Unavailable,
    close_mysql_pool,
    mysql_database,
    mysql_pool,
    postgres_database,
    postgres_pool,
    steerable_mysql,
    steerable_postgres,
)
from bench._service_counting import Both, Counting, CountingNotifying
from steerable.errors import Fenced
from steerable.service import Service
from steerable.service.agent import ReActAgent
from steerable.service.demo import DemoModel
from steerable.service_store import Input, Lease, Notifying, Renewal
from steerable.spec import Spec
from steerable.stores.sqlite import SQLiteStore
from steerable.tools import Tool, tool

TURNS = (10, 1_000)
QUICK_TURNS = (10, 100)
STORES = ("sqlite", "postgres", "mysql")
NAMES = {"sqlite": "SQLite", "postgres": "Postgres", "mysql": "MariaDB/MySQL"}
MODES = ("per turn", "together")
POOL = 20
SETUP = 120.0  # how long N turns may take to reach their tool


class Together(Counting):
    """:class:`Counting`, and how many leases its renewal calls carried in all."""

    leases = 0

    async def renew_many(self, leases: Sequence[Lease], *, seconds: float) -> list[Renewal | None]:
        """Counted ``renew_many``; its leases counted too."""
        self.leases += len(leases)
        return await super().renew_many(leases, seconds=seconds)


class PerTurn(Together):
    """``renew_many`` answered with one ``renew`` per lease, all at once (each counted)."""

    async def renew_many(self, leases: Sequence[Lease], *, seconds: float) -> list[Renewal | None]:
        """One counted ``renew`` per lease, as the replica's per-turn tasks made them."""
        self.leases += len(leases)

        async def one(lease: Lease) -> Renewal | None:
            try:
                return await self.renew(lease, seconds=seconds)
            except Fenced:
                return None

        return list(await asyncio.gather(*(one(lease) for lease in leases)))


class TogetherNotifying(Together, CountingNotifying):
    """:class:`Together` with the inner store's hints (Postgres: no stop poll)."""


class PerTurnNotifying(PerTurn, CountingNotifying):
    """:class:`PerTurn` with the inner store's hints."""


def _counted(store: Both, mode: str) -> Together:
    """``store`` counted, renewing ``mode``'s way, with its hints where it has them."""
    if isinstance(store, Notifying):
        return PerTurnNotifying(store) if mode == "per turn" else TogetherNotifying(store)
    return PerTurn(store) if mode == "per turn" else Together(store)


def _waiting_agent(started: list[int], release: asyncio.Event) -> ReActAgent:
    """One ``work`` call a turn, which waits for ``release`` (``started`` counts them)."""

    async def work(step: int) -> str:
        """Wait, like a slow tool."""
        started.append(step)
        await release.wait()
        return f"step {step} done"

    worker: Tool = tool(name="work")(work)
    return ReActAgent(Spec(tools=[worker], max_steps=5), DemoModel(calls=1))


@dataclass
class Point:
    """One store, N turns, one way to renew: what the window counted."""

    store: str
    turns: int
    mode: str
    seconds: float
    calls: dict[str, int]
    cpu: float
    leases: int  # renewed in the window, in all its renewal calls

    def per_second(self, *verbs: str) -> float:
        """The calls per second of ``verbs`` (all of them if none is named)."""
        chosen = verbs or tuple(self.calls)
        return sum(self.calls.get(v, 0) for v in chosen) / self.seconds

    @property
    def renewals(self) -> float:
        """Renewal calls per second, whichever the verb."""
        return self.per_second("renew", "renew_many")


async def measure(store: Both, name: str, turns: int, mode: str, args: argparse.Namespace) -> Point:
    """Serve ``turns`` waiting turns over ``store`` and count the calls of one window."""
    counted = _counted(store, mode)
    started: list[int] = []
    release = asyncio.Event()
    service = Service(
        counted,
        _waiting_agent(started, release),
        replica=f"bench-{uuid.uuid4().hex[:6]}",
        lease=args.lease,
        poll=0.2,
        concurrency=turns,
    )
    tag = uuid.uuid4().hex[:8]
    async with service.serving():
        for n in range(turns):
            await store.enqueue(f"lease-{tag}-{n}", Input("send", "wait"))
        deadline = time.monotonic() + SETUP
        while len(started) < turns:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name}: {len(started)} of {turns} turns reached the tool")
            await asyncio.sleep(0.05)
        counted.calls.clear()  # "hints": entered once, before the window
        counted.leases = 0
        began, cpu = time.perf_counter(), time.process_time()
        await asyncio.sleep(args.window)
        seconds, used = time.perf_counter() - began, time.process_time() - cpu
        calls, leases = dict(counted.calls), counted.leases
        release.set()
    return Point(name, turns, mode, seconds, calls, used / seconds, leases)


# -- the stores: a fresh one per point ------------------------------------------------------


@contextlib.asynccontextmanager
async def _sqlite(root: Path) -> AsyncIterator[Both]:
    async with SQLiteStore(root / f"leases-{uuid.uuid4().hex[:8]}.db") as store:
        typed: Both = store
        yield typed


@contextlib.asynccontextmanager
async def _postgres(root: Path) -> AsyncIterator[Both]:
    async with postgres_database("leases") as db:
        pool = await postgres_pool(db, POOL)
        try:
            yield await steerable_postgres(pool)
        finally:
            await pool.close()


@contextlib.asynccontextmanager
async def _mysql(root: Path) -> AsyncIterator[Both]:
    async with mysql_database("leases") as db:
        pool = await mysql_pool(db, POOL)
        try:
            yield await steerable_mysql(pool)
        finally:
            await close_mysql_pool(pool)


OPENERS: dict[str, Callable[[Path], contextlib.AbstractAsyncContextManager[Both]]] = {
    "sqlite": _sqlite,
    "postgres": _postgres,
    "mysql": _mysql,
}


async def run(args: argparse.Namespace) -> tuple[list[Point], list[str]]:
    """Every store, every N, both modes; the points and the notes."""
    points: list[Point] = []
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-leases-") as root:
        for key in args.stores:
            try:
                for turns in args.turns:
                    for mode in MODES:
                        async with OPENERS[key](Path(root)) as store:
                            point = await measure(store, NAMES[key], turns, mode, args)
                        points.append(point)
                        done = f"{point.per_second():.1f} calls/s"
                        print(f"{point.store}, {turns} turns, {mode}: {done}", file=sys.stderr)
            except Unavailable as exc:
                notes.append(f"{NAMES[key]} skipped: {exc}")
    return points, notes


def report(points: list[Point], args: argparse.Namespace) -> str:
    """The table: per store and N, both modes, and the ratio of their calls."""
    rows = []
    for point in points:
        before = next(
            p for p in points if (p.store, p.turns, p.mode) == (point.store, point.turns, MODES[0])
        )
        renewal_calls = point.calls.get("renew", 0) + point.calls.get("renew_many", 0)
        leases = point.leases / max(renewal_calls, 1)
        rows.append(
            [
                point.store,
                f"{point.turns:,}",
                point.mode,
                f"{point.per_second():.1f}",
                f"{point.renewals:.1f}",
                f"{leases:.0f}",
                f"{point.per_second('stopping'):.1f}",
                f"{point.cpu * 100:.1f}%",
                f"{point.per_second() / before.per_second():.3f}x",
            ]
        )
    headers = [
        "store",
        "turns",
        "renewals",
        "calls/s",
        "renewal calls/s",
        "leases a call",
        "stopping/s",
        "replica CPU",
        "calls vs per turn",
    ]
    return table(headers, rows)


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the arguments, run, print the report (and the JSON line)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--quick", action="store_true", help="SQLite, 10 and 100 turns, seconds")
    parser.add_argument("--stores", nargs="+", choices=STORES, default=None)
    parser.add_argument("--turns", nargs="+", type=int, default=None)
    parser.add_argument("--lease", type=float, default=None, help="seconds (renewed every third)")
    parser.add_argument("--window", type=float, default=None, help="seconds counted per point")
    parser.add_argument("--json", action="store_true", help="a JSON line of the figures at the end")
    args = parser.parse_args(argv)
    quick = args.quick
    args.stores = args.stores or (["sqlite"] if quick else list(STORES))
    args.turns = args.turns or list(QUICK_TURNS if quick else TURNS)
    args.lease = args.lease or (0.9 if quick else 3.0)
    args.window = args.window or (1.2 if quick else 5.0)
    points, notes = asyncio.run(run(args))
    print(machine([f"- SQLite {sqlite3.sqlite_version}"]))
    print(
        f"\nA replica holding N turns that wait on a tool: its store calls over {args.window:g} s,"
        f" lease {args.lease:g} s renewed every {args.lease / 3:g} s\n"
    )
    print(report(points, args))
    for note in notes:
        print(f"\n- {note}")
    if args.json:
        found: dict[str, Any] = {
            "lease": args.lease,
            "window": args.window,
            "turns": args.turns,
            "points": [
                {
                    "store": p.store,
                    "turns": p.turns,
                    "mode": p.mode,
                    "calls": p.calls,
                    "calls_per_s": p.per_second(),
                    "renewal_calls_per_s": p.renewals,
                    "cpu": p.cpu,
                    "leases": p.leases,
                }
                for p in points
            ],
            "notes": notes,
        }
        print(json.dumps(found))


if __name__ == "__main__":
    main()
