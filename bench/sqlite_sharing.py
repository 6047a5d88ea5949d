"""Sharing one SQLite file: steers taken per second by one store, many stores, many processes.

The same work each time: ``--steers`` steers wait in one session, and ``--takers`` concurrent
tasks take them one at a time (``take_steers(limit=1)``: every steer a write transaction of
its own, the most contention there can be) until the box is empty. What changes is how the
takers reach the file:

- one store object shared by every taker (one process);
- one store object per taker, in one process (as many connections);
- ``P`` processes, each with one store object shared by its share of the takers.

Every run checks that each steer was taken once (none twice, none lost, none left). A
figure is the median over ``--reps`` interleaved repetitions of steers taken a second, from
the first take to the last (each process reports its own times on the system's monotonic
clock). ``python -m bench.sqlite_sharing`` (``--quick``: a few seconds; ``--json``: one JSON
line of the figures at the end); it exits non-zero if a steer was taken twice or lost.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench._common import machine, median, table
from steerable import Steer
from steerable.stores.sqlite import SQLiteStore

Taken = tuple[float, float, list[str]]  # first take started, last take ended, ids taken


async def _take(stores: Sequence[SQLiteStore], session: str, takers: int) -> Taken:
    """``takers`` tasks (taker ``i`` on ``stores[i % len(stores)]``) until the box is empty."""
    taken: list[str] = []

    async def taker(store: SQLiteStore) -> None:
        while got := await store.take_steers(session, at=None, limit=1):
            taken.extend(m.id for m in got)

    start = time.monotonic()
    async with asyncio.TaskGroup() as group:
        for i in range(takers):
            group.create_task(taker(stores[i % len(stores)]))
    return start, time.monotonic(), taken


def _process(path: Path, session: str, takers: int, go: Any, out: Any) -> None:
    """One process: a store, ``takers`` tasks, started together with the others by ``go``."""

    async def main() -> Taken:
        async with SQLiteStore(path) as store:
            await store.steers(session)  # connected before the race starts
            out.put("ready")
            await asyncio.get_running_loop().run_in_executor(None, go.wait, 60)
            return await _take([store], session, takers)

    out.put(asyncio.run(main()))


async def _leave(path: Path, session: str, count: int) -> list[str]:
    ids = [uuid.uuid4().hex for _ in range(count)]
    async with SQLiteStore(path) as store:
        for steer_id in ids:
            await store.steer(session, Steer("a steer", steer_id))
    return ids


async def in_processes(path: Path, session: str, takers: int, processes: int) -> list[Taken]:
    context = multiprocessing.get_context("spawn")
    out, go = context.Queue(), context.Event()
    shares = [takers // processes + (i < takers % processes) for i in range(processes)]
    workers = [
        context.Process(target=_process, args=(path, session, share, go, out)) for share in shares
    ]
    loop = asyncio.get_running_loop()
    for worker in workers:
        worker.start()
    try:
        for _ in workers:
            assert await loop.run_in_executor(None, out.get, True, 120) == "ready"
        go.set()
        return [await loop.run_in_executor(None, out.get, True, 300) for _ in workers]
    finally:
        go.set()
        for worker in workers:
            await loop.run_in_executor(None, worker.join, 30)
            if worker.is_alive():
                worker.kill()


async def in_one_process(path: Path, session: str, takers: int, stores: int) -> list[Taken]:
    async with contextlib.AsyncExitStack() as stack:
        opened = [await stack.enter_async_context(SQLiteStore(path)) for _ in range(stores)]
        return [await _take(opened, session, takers)]


async def run_one(root: Path, name: str, steers: int, takers: int) -> tuple[float, int]:
    """One run of the layout ``name``: steers a second, and how many steers went wrong."""
    path = root / f"{uuid.uuid4().hex}.db"
    session = "s"
    ids = await _leave(path, session, steers)
    kind, count = name.split(":")
    if kind == "stores":
        results = await in_one_process(path, session, takers, int(count))
    else:
        results = await in_processes(path, session, takers, int(count))
    start = min(r[0] for r in results)
    end = max(r[1] for r in results)
    taken = [i for r in results for i in r[2]]
    async with SQLiteStore(path) as store:
        left = len(await store.steers(session))
    wrong = len(taken) - len(set(taken)) + len(set(ids) - set(taken)) + left
    return steers / (end - start), wrong


def layouts(takers: int, processes: Sequence[int]) -> list[tuple[str, str]]:
    """(key, label) of each way of reaching the file."""
    found = [("stores:1", "1 store, 1 process")]
    found += [(f"stores:{takers}", f"{takers} stores, 1 process")]
    found += [(f"processes:{p}", f"{p} processes, 1 store each") for p in processes]
    return found


async def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    add = parser.add_argument
    add("--steers", type=int, default=2000, help="steers per run")
    add("--takers", type=int, default=48, help="concurrent takers in all")
    add("--processes", type=int, nargs="+", default=[4, 16], help="process counts to run")
    add("--reps", type=int, default=3, help="interleaved repetitions")
    add("--quick", action="store_true", help="a few seconds: 300 steers, 1 repetition")
    add("--json", action="store_true", help="end with one JSON line of the figures")
    args = parser.parse_args(argv)
    if args.quick:
        args.steers, args.reps, args.processes = 300, 1, [4]
    started = time.perf_counter()
    found = layouts(args.takers, args.processes)
    rates: dict[str, list[float]] = {key: [] for key, _ in found}
    wrong = 0
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-sharing-") as directory:
        for rep in range(args.reps):
            shift = rep % len(found)
            for key, _ in found[shift:] + found[:shift]:
                rate, bad = await run_one(Path(directory), key, args.steers, args.takers)
                rates[key].append(rate)
                wrong += bad
    after = os.getloadavg()[0]
    base = median(rates[found[0][0]])
    rows = [
        [label, f"{median(rates[key]):,.0f}", f"{median(rates[key]) / base:.2f}x"]
        for key, label in found
    ]
    print("# Sharing one SQLite file\n")
    extra = [
        f"- {args.steers} steers taken one a transaction by {args.takers} concurrent takers;"
        f" {args.reps} interleaved repetitions, medians",
        f"- load average (1 min) {load:.2f} before, {after:.2f} after",
    ]
    print(machine(extra))
    print()
    print(table(["layout", "steers taken/s", "vs 1 store"], rows))
    print(f"\nSteers taken twice, lost or left: {wrong}")
    print(f"\n({time.perf_counter() - started:.0f} s)")
    if args.json:
        figures = {label: median(rates[key]) for key, label in found}
        print(json.dumps({"steers_per_second": figures, "wrong": wrong, "load": [load, after]}))
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
