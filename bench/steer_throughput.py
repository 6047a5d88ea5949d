"""Steer throughput: steers taken per second by 50 concurrent takers, each taken once.

On each store, one session gets ``--steers`` steers, left by 50 concurrent senders, and 50
concurrent takers (``Store.take_steers(session, at=None, limit=k)``, the atomic
take-and-record a run does at its step) take them until the box is empty:

- drain, limit 1: every steer its own take, the most contention there can be;
- drain, limit 16: the loop's default take (``steers_per_turn``);
- live, limit 16: 5 senders leave steers while the 50 takers poll (1 ms pause on an
  empty take), so leaving and taking race.

Exactly once is checked three ways and printed: ids returned twice (duplicates), ids sent
but never returned (losses), and the session's transcript, which must hold each steer
as exactly one steered message (and nothing may be left waiting).

Stores: memory (one object), SQLite (one object shared by the takers, and one object per
taker: 50 connections contending for the file's write lock, as 50 processes would), and
Postgres, MySQL/MariaDB and MongoDB when steerable's store imports and the server answers
(one pool of ``--pool`` connections shared by the takers, as an application would).
Run: ``python -m bench.steer_throughput``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench._common import machine, median, table
from bench._servers import (
    Unavailable,
    close_mysql_pool,
    mongodb_database,
    mysql_database,
    mysql_pool,
    postgres_database,
    postgres_pool,
    steerable_mongodb,
    steerable_mysql,
    steerable_postgres,
)
from steerable import Steer, Store
from steerable.stores.memory import MemoryStore
from steerable.stores.sqlite import SQLiteStore

SENDERS_LIVE = 5

Opener = Callable[[contextlib.AsyncExitStack[Any], int], Awaitable[tuple[Store, str]]]
"""Opens a server store on a fresh database with a pool of the given size: (store, note)."""


@dataclass
class Target:
    """A store under test; taker ``i`` uses ``stores[i % len(stores)]``."""

    name: str
    stores: list[Store]

    def store(self, index: int) -> Store:
        return self.stores[index % len(self.stores)]


@dataclass
class Outcome:
    """One scenario on one target: timings and every id seen."""

    seconds: float
    left_seconds: float
    sent: list[str]
    taken: list[str]
    recorded: list[str]  # the steered message ids in the transcript
    waiting: int
    empty_takes: int
    latencies: list[float]  # from the call to steer() to the take that returned it

    @property
    def problems(self) -> dict[str, int]:
        sent = set(self.sent)
        return {
            "duplicates": len(self.taken) - len(set(self.taken)),
            "losses": len(sent - set(self.taken)),
            "recorded twice": len(self.recorded) - len(set(self.recorded)),
            "not recorded": len(sent - set(self.recorded)),
            "unknown": len(set(self.taken) - sent) + len(set(self.recorded) - sent),
            "still waiting": self.waiting,
        }


@dataclass
class Row:
    """A target and scenario over all repetitions."""

    target: str
    scenario: str
    outcomes: list[Outcome] = field(default_factory=list)


async def _leave(
    target: Target, session: str, ids: list[str], senders: int, left: dict[str, float]
) -> None:
    async def sender(index: int) -> None:
        store = target.store(index)
        for steer_id in ids[index::senders]:
            left[steer_id] = time.perf_counter()
            await store.steer(session, Steer(f"steer {steer_id[:8]}", steer_id))

    async with asyncio.TaskGroup() as group:
        for index in range(senders):
            group.create_task(sender(index))


async def run_scenario(target: Target, steers: int, takers: int, limit: int, live: bool) -> Outcome:
    """Leave ``steers`` steers (before the takers start, or meanwhile when ``live``)."""
    session = uuid.uuid4().hex
    ids = [uuid.uuid4().hex for _ in range(steers)]
    taken: list[str] = []
    left: dict[str, float] = {}
    took: dict[str, float] = {}
    empty = 0
    left_seconds = float("nan")
    sending_done = asyncio.Event()
    if not live:
        start = time.perf_counter()
        await _leave(target, session, ids, takers, left)
        left_seconds = time.perf_counter() - start
        sending_done.set()

    async def taker(index: int) -> None:
        nonlocal empty
        store = target.store(index)
        while True:
            done = sending_done.is_set()
            got = await store.take_steers(session, at=None, limit=limit)
            now = time.perf_counter()
            for message in got:
                taken.append(message.id)
                took.setdefault(message.id, now)
            if not got:
                empty += 1
                if done:
                    return
                await asyncio.sleep(0.001)

    async def senders() -> None:
        await _leave(target, session, ids, SENDERS_LIVE, left)
        sending_done.set()

    start = time.perf_counter()
    async with asyncio.TaskGroup() as group:
        if live:
            group.create_task(senders())
        for index in range(takers):
            group.create_task(taker(index))
    seconds = time.perf_counter() - start
    store = target.store(0)
    recorded = [m.id for m in await store.messages(session) if m.steered]
    waiting = len(await store.steers(session))
    latencies = [took[i] - left[i] for i in took if i in left]
    return Outcome(seconds, left_seconds, ids, taken, recorded, waiting, empty, latencies)


SCENARIOS: list[tuple[str, int, bool]] = [
    ("drain, limit 1", 1, False),
    ("drain, limit 16", 16, False),
    ("live, limit 16", 16, True),
]


async def measure(targets: list[Target], args: argparse.Namespace) -> list[Row]:
    """Every scenario on every target, repetitions interleaved."""
    rows = {(t.name, s[0]): Row(t.name, s[0]) for t in targets for s in SCENARIOS}
    runs = [(t, s) for t in targets for s in SCENARIOS]
    for rep in range(args.reps):
        shift = rep % len(runs)
        for target, (scenario, limit, live) in runs[shift:] + runs[:shift]:
            outcome = await run_scenario(target, args.steers, args.takers, limit, live)
            rows[(target.name, scenario)].outcomes.append(outcome)
    return list(rows.values())


def report(rows: list[Row]) -> tuple[str, int]:
    """The table, and the total count of exactly-once violations."""
    lines = []
    bad = 0
    for row in rows:
        problems: dict[str, int] = {}
        for outcome in row.outcomes:
            for name, count in outcome.problems.items():
                problems[name] = problems.get(name, 0) + count
        bad += sum(problems.values())
        rate = median([len(o.sent) / o.seconds for o in row.outcomes])
        left = median([len(o.sent) / o.left_seconds for o in row.outcomes])
        takes = median([(len(o.taken) + o.empty_takes) / o.seconds for o in row.outcomes])
        latency = median([median(o.latencies) for o in row.outcomes])
        lines.append(
            [
                row.target,
                row.scenario,
                f"{rate:,.0f}",
                f"{takes:,.0f}",
                f"{left:,.0f}" if left == left else "-",
                f"{latency * 1e3:.1f}" if "live" in row.scenario else "-",
                str(problems["duplicates"]),
                str(problems["losses"]),
                str(problems["recorded twice"] + problems["not recorded"]),
                str(problems["unknown"] + problems["still waiting"]),
            ]
        )
    headers = ["store", "scenario", "taken/s", "takes/s", "left/s", "ms to take", "dup", "lost"]
    return table([*headers, "transcript wrong", "other"], lines), bad


@contextlib.asynccontextmanager
async def targets(args: argparse.Namespace) -> AsyncIterator[tuple[list[Target], list[str]]]:
    """The stores to measure, and notes on the backends skipped."""
    notes: list[str] = []
    found: list[Target] = [Target("memory", [MemoryStore()])] if "memory" in args.stores else []
    async with contextlib.AsyncExitStack() as stack:
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-steer-")))
        if "sqlite" in args.stores:
            shared = await stack.enter_async_context(SQLiteStore(root / "shared.db"))
            found.append(Target("SQLite, 1 store", [shared]))
            own: list[Store] = []
            for _ in range(args.takers):
                one = await stack.enter_async_context(SQLiteStore(root / "own.db"))
                own.append(one)
            found.append(Target(f"SQLite, {args.takers} stores", own))
        servers: list[tuple[str, str, Opener]] = [
            ("postgres", "Postgres", _postgres),
            ("mysql", "MySQL/MariaDB", _mysql),
            ("mongodb", "MongoDB", _mongodb),
        ]
        for key, name, open_target in servers:
            if key not in args.stores:
                continue
            try:
                server_store, note = await open_target(stack, args.pool)
            except Unavailable as exc:
                notes.append(f"{name} skipped: {exc}")
                continue
            found.append(Target(f"{name}, pool {args.pool}", [server_store]))
            if note:
                notes.append(note)
        yield found, notes


async def _postgres(stack: contextlib.AsyncExitStack, size: int) -> tuple[Store, str]:
    db = await stack.enter_async_context(postgres_database("steer"))
    pool = await postgres_pool(db, size)
    stack.push_async_callback(pool.close)
    store: Store = await steerable_postgres(pool)
    return store, ""


async def _mysql(stack: contextlib.AsyncExitStack, size: int) -> tuple[Store, str]:
    db = await stack.enter_async_context(mysql_database("steer"))
    pool = await mysql_pool(db, size)
    stack.push_async_callback(close_mysql_pool, pool)
    store: Store = await steerable_mysql(pool)
    return store, ""


async def _mongodb(stack: contextlib.AsyncExitStack, size: int) -> tuple[Store, str]:
    _, db, server = await stack.enter_async_context(mongodb_database("steer", size))
    store: Store = await steerable_mongodb(db)
    return store, f"MongoDB: the server is {server}"


def arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--steers", type=int, default=400, help="steers per scenario run")
    parser.add_argument("--takers", type=int, default=50, help="concurrent takers")
    parser.add_argument("--pool", type=int, default=10, help="server pool connections")
    parser.add_argument("--reps", type=int, default=3, help="interleaved repetitions")
    stores = ["memory", "sqlite", "postgres", "mysql", "mongodb"]
    parser.add_argument("--stores", nargs="+", default=stores, choices=stores)
    return parser.parse_args(argv)


async def main(argv: Sequence[str] | None = None) -> int:
    args = arguments(argv)
    started = time.perf_counter()
    async with targets(args) as (found, notes):
        rows = await measure(found, args)
    text, bad = report(rows)
    print("# Steer throughput\n")
    print(
        machine(
            [
                f"- {args.takers} concurrent takers, {args.steers} steers a run,"
                f" {args.reps} repetitions (medians)"
            ]
        )
    )
    print()
    print(text)
    for note in notes:
        print(f"\n- {note}")
    print(f"\nexactly-once violations: {bad}")
    print(f"\n({time.perf_counter() - started:.0f} s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
