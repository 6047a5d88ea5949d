"""The service over HTTP: ``steerable serve`` (one replica and three) beside LangGraph's
Agent Server in its local mode (``langgraph dev``), on the same scripted agent.

Three figures, in one run, rounds interleaved (every system per round, in a rotating
order), medians:

1. **send -> first model request**: a message to a new (idle) session until its turn's
   first model request (steerable: the first ``step`` event's ``at``; LangGraph: the fake
   model's log line).
2. **steer -> the request that carries it**: a message ``--lead`` s after the turn's first
   request (its tool sleeps ``--tool`` s): steerable's ``POST .../steers`` until its
   ``steers_taken`` event; LangGraph's second run under ``multitask_strategy=interrupt``
   until a model request that carries it. What becomes of that message under each of
   LangGraph's strategies (reject, rollback, interrupt, enqueue) is printed beside ours.
3. **turns per second**: ``--sessions`` sessions x ``--sends`` messages sent at once,
   until every turn has ended (LangGraph: runs enqueued on their threads).

steerable runs the keyless demo agent (``bench/_http_agent.py``) in ``steerable serve``
processes over one Postgres database (created for the run, migrated, dropped): one
replica, and three behind nginx when ``nginx`` is installed (else the bench takes the three
in turn, and says so). LangGraph runs ``bench/_http_langgraph_graph.py`` (a fake chat
model calling one sleeping tool, then answering) under the ``langgraph`` command of
``BENCH_LANGGRAPH`` (or ``PATH``): install ``langgraph-cli[inmem]`` in a venv of its own.
``--quick`` runs in under a minute. Run: ``python -m bench.http``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Sequence
from pathlib import Path
from typing import TypeVar

import httpx

from bench import _http_servers as servers
from bench._common import machine, median, ratio, table
from bench._http_measure import STRATEGIES, Figures, LangGraph, Ours
from bench._servers import PG_HOST, PG_PORT, PG_USER, Unavailable, postgres_database

T = TypeVar("T")
System = Ours | LangGraph


def ms(seconds: float) -> str:
    """``seconds`` as milliseconds, one decimal under 100."""
    value = seconds * 1e3
    if value != value:
        return "n/a"
    return f"{value:.1f}" if value < 100 else f"{value:,.0f}"


def _rotated(items: list[T], index: int) -> list[T]:
    shift = index % len(items) if items else 0
    return items[shift:] + items[:shift]


async def _guarded(figures: Figures, work: Awaitable[None], limit: float) -> None:
    """Run one round's work; a failure is noted on ``figures`` and the system is dropped."""
    try:
        await asyncio.wait_for(work, limit)
    except (TimeoutError, AssertionError, httpx.HTTPError, KeyError) as exc:
        figures.failed = f"{type(exc).__name__}: {exc}"[:300]


async def _round(system: System, args: argparse.Namespace) -> None:
    for _ in range(args.samples):
        await system.wake()
    for _ in range(args.samples):
        if isinstance(system, Ours):
            await system.steer(args.lead)
        else:  # interrupt is the steer figure: every sample
            await system.steer(args.lead, "interrupt")
    if isinstance(system, LangGraph):  # and the other strategies once a round
        for strategy in STRATEGIES:
            if strategy != "interrupt":
                await system.steer(args.lead, strategy)
    await system.throughput(args.sessions, args.sends)


async def measure(systems: list[System], args: argparse.Namespace) -> None:
    """Every system, each round, in a rotating order."""
    for index in range(args.rounds):
        for system in _rotated(systems, index):
            if system.figures.failed is None:
                await _guarded(system.figures, _round(system, args), 120)


def figures_table(found: list[Figures]) -> str:
    """The three figures, and each one's ratio to one steerable replica."""
    base = found[0]
    rows = []
    for f in found:
        rows.append(
            [
                f.name,
                ms(median(f.wake)),
                ratio(median(f.wake), median(base.wake)),
                ms(median(f.steer)),
                ratio(median(f.steer), median(base.steer)),
                f"{median(f.rate):,.1f}",
                ratio(median(f.rate), median(base.rate)),
                f"{len(f.wake)}/{len(f.steer)}/{len(f.rate)}",
            ]
        )
    headers = [
        "system",
        "send -> 1st request ms",
        "vs 1 replica",
        "steer -> its request ms",
        "vs 1 replica",
        "turns/s",
        "vs 1 replica",
        "n",
    ]
    return table(headers, rows)


def fates(found: list[Figures]) -> str:
    """What became of a message sent during a run, by system and strategy."""
    lines = []
    for f in found:
        for strategy, seen in f.fates.items():
            counts = Counter(seen)
            carried = f.carried.get(strategy, [])
            when = f"; carried {ms(median(carried))} ms after it was sent" if carried else ""
            for fate, n in counts.most_common(2):
                lines.append(f"- {f.name}, {strategy}{when}: {fate} (x{n})")
    return "\n".join(lines)


def arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer rounds: under a minute")
    parser.add_argument("--rounds", type=int, default=4, help="interleaved rounds")
    parser.add_argument("--samples", type=int, default=4, help="samples per figure per round")
    parser.add_argument("--tool", type=float, default=0.3, help="the tool's seconds")
    parser.add_argument("--lead", type=float, default=0.1, help="steer this long into the tool")
    parser.add_argument("--sessions", type=int, default=20, help="throughput: sessions")
    parser.add_argument("--sends", type=int, default=3, help="throughput: sends per session")
    parser.add_argument("--jobs", type=int, default=32, help="langgraph dev --n-jobs-per-worker")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.samples, args.sessions, args.sends = 1, 2, 8, 2
    return args


def _progress(started: float, phase: str) -> None:
    print(f"[{time.perf_counter() - started:4.0f} s] {phase}", file=sys.stderr, flush=True)


async def _systems(
    stack: contextlib.AsyncExitStack,
    root: Path,
    args: argparse.Namespace,
    client: httpx.AsyncClient,
    notes: list[str],
) -> list[System]:
    systems: list[System] = []
    for count in (1, 3):
        db = await stack.enter_async_context(postgres_database(f"http{count}"))
        url = f"postgresql://{PG_USER}@{PG_HOST}:{PG_PORT}/{db.name}"
        servers.migrate(url)
        urls = await stack.enter_async_context(
            servers.replicas(url, count, root, f"r{count}", args.tool)
        )
        name = "steerable serve, 1 replica"
        if count == 3:
            try:
                urls = [await stack.enter_async_context(servers.nginx(root, urls))]
                name = "steerable serve, 3 replicas behind nginx"
            except Unavailable as exc:
                notes.append(f"no nginx ({exc}): the bench takes the three replicas in turn")
                name = "steerable serve, 3 replicas (round robin by the bench)"
        systems.append(Ours(name, urls, client))
    try:
        url, log = await stack.enter_async_context(
            servers.langgraph_dev(root, args.tool, args.jobs)
        )
        systems.append(LangGraph(url, log, client))
    except Unavailable as exc:
        notes.append(f"LangGraph's Agent Server did not run: {exc}")
    return systems


async def main(argv: Sequence[str] | None = None) -> None:
    args = arguments(argv)
    started = time.perf_counter()
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-http-") as name:
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=100)
        async with (
            contextlib.AsyncExitStack() as stack,
            httpx.AsyncClient(timeout=30, limits=limits) as client,
        ):
            _progress(started, "starting the servers")
            systems = await _systems(stack, Path(name), args, client, notes)
            _progress(started, "measuring")
            await measure(systems, args)
            _progress(started, "stopping the servers")
    found = [s.figures for s in systems]
    print("# The service over HTTP\n")
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    header = [
        f"- {args.rounds} rounds, {args.samples} samples per figure per round;"
        f" a tool of {args.tool:g} s, the steer {args.lead:g} s into it;"
        f" {args.sessions} sessions x {args.sends} sends per throughput round;"
        f" langgraph dev --n-jobs-per-worker {args.jobs}; load at the end {load}"
    ]
    print(machine(header))
    print("\n## The three figures\n")
    print(figures_table(found))
    print("\n## A message sent during a run\n")
    print(fates(found))
    for f in found:
        if f.failed:
            notes.append(f"{f.name} failed: {f.failed}")
    for note in notes:
        print(f"\n- {note}")
    print(f"\n({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    asyncio.run(main())
