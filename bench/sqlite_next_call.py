"""The SQLite store's next worker call after a claim that read a whole long transcript.

A claim that knows nothing reads and decodes the session's whole transcript; on SQLite the
store's *next* call on its worker thread took longer after it (about 1 ms in
``bench.turn_length``). This measures that next call, split in three:

- *hop in*: from the ``await`` to the worker running the call's work (the executor's queue,
  the worker's wake-up, the GIL);
- *work*: the SQLite work on the worker (``status`` of another session: a read transaction,
  three ``SELECT``s);
- *hop back*: from the work's end to the caller resuming.

Each round runs every case below once, in a rotating order, on one file: ``enqueue`` a send
to a session of ``--messages`` messages (~1 KB each), ``claim`` it, ``end_turn`` (on the
loop's thread), drop the claim, then the next call, timed; two short sleeps after it, so no
case pays for the one before. A figure is the median over the rounds after the first
``--warm``.

- *whole*: the claim reads and decodes the whole transcript; *held*: as the replica that
  served the session's last turn, it reads nothing (``known``: the whole transcript).
- *before*: the worker's result comes back through the executor's future, as before this
  fix: the event loop keeps that future (in the handle that wakes the caller's task) until
  the task next yields, so the claim's raw rows (a tuple and two strings per message, ~11 MB
  at 10,000) are freed at the caller's next ``await``, on the loop's thread, with the GIL held
  while the worker just woken for the next call waits for it. *after*: the store's code
  (:meth:`Connections.call` hands the result back beside the future).
- *gc off*: ``gc.disable()`` from before the claim to after the next call (a gen-2 collection
  landing in the next call would show here). Collections are also counted with
  ``gc.callbacks`` during each next call.
- *yield first*: one ``await asyncio.sleep(0)`` (timed) between the claim and the next call:
  where the freeing goes when the task yields before the next call.
- *before end_turn*: the next call runs before ``end_turn``: no other connection has written
  since the claim, so the worker's page cache (full of the transcript's pages) is kept; after
  a write on the loop's connection, SQLite discards it at the worker's next read.
- *16 MB read*: a held claim, then a pass over 16 MB of memory before the next call (the CPU's
  caches emptied as a whole read and its freeing empty them).

``python -m bench.sqlite_next_call`` (about 30 s here); ``--quick`` (1,000 messages, 8
rounds); ``--json``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sqlite3
import tempfile
import time
import types
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from bench._common import Payloads, machine, median, micros, table
from bench.turn_length import fill, history
from steerable.service_store import Claim, Input, Known, Outcome
from steerable.stores import _sqlite_views as views
from steerable.stores._sqlite_connections import Connections
from steerable.stores.sqlite import SQLiteStore

_T = TypeVar("_T")

CASES = (
    "whole, before",
    "whole, after",
    "held, after",
    "whole, before, gc off",
    "whole, after, gc off",
    "whole, before, yield first",
    "whole, after, before end_turn",
    "held, after, 16 MB read",
)
PARTS = ("claim", "yield", "next call", "hop in", "work", "hop back")
TOUCH = 16 * 1024 * 1024


async def _call_before(self: Connections, work: Callable[[sqlite3.Connection], _T]) -> _T:
    """:meth:`Connections.call` before the fix: the result through the executor's future."""
    return await asyncio.get_running_loop().run_in_executor(self._executor, self._run, work)


@dataclass
class Case:
    name: str
    seconds: dict[str, list[float]] = field(default_factory=lambda: {p: [] for p in PARTS})
    collections: list[int] = field(default_factory=list)  # gc runs during each next call
    in_claims: list[list[int]] = field(default_factory=list)  # per generation, each claim

    def has(self, part: str) -> bool:
        """Whether ``part`` is one of the name's comma-separated parts."""
        return part in self.name.split(", ")


class Collections:
    """How many collections started, per generation (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.started = [0, 0, 0]

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self.started[info["generation"]] += 1


async def one(
    store: SQLiteStore, case: Case, known: Known | None, memory: bytes, counted: bool
) -> Known:
    """One case: enqueue, claim, end_turn, the next call timed; the transcript now held.
    ``memory``: what *16 MB read* reads (made once: its pages are the process's own)."""
    clock = time.perf_counter
    conn = store._connections
    if case.has("before"):
        conn.call = types.MethodType(_call_before, conn)  # type: ignore[method-assign]
    gc_off = case.has("gc off")
    collections, in_claim = Collections(), Collections()
    times: dict[str, float] = {}
    try:
        await store.enqueue("long", Input("send", "go", f"in-{uuid.uuid4().hex}"))
        if gc_off:
            gc.disable()
        gc.callbacks.append(in_claim)
        t0 = clock()
        claim: Claim | None = await store.claim(
            "bench",
            seconds=60,
            cap=16,
            session="long",
            known=None if case.has("whole") or known is None else {"long": known},
        )
        times["claim"] = clock() - t0
        gc.callbacks.remove(in_claim)
        assert claim is not None
        lease, held = claim.lease, Known(claim.known + len(claim.messages), claim.mark)
        del claim  # the messages freed here, untimed (a replica would keep them)
        if not case.has("before end_turn"):
            await store.end_turn(lease, Outcome("completed", "done"))
        if case.has("yield first"):
            t0 = clock()
            await asyncio.sleep(0)
            times["yield"] = clock() - t0
        if case.has("16 MB read"):
            memory.count(1)
        marks: dict[str, float] = {}

        def work(db: sqlite3.Connection) -> None:
            marks["start"] = clock()
            views.status(db, "other", 100)
            marks["end"] = clock()

        gc.callbacks.append(collections)
        t0 = clock()
        await conn.call(work)
        t1 = clock()
        gc.callbacks.remove(collections)
        if case.has("before end_turn"):
            await store.end_turn(lease, Outcome("completed", "done"))
    finally:
        gc.enable()
        for callback in (in_claim, collections):
            if callback in gc.callbacks:
                gc.callbacks.remove(callback)
        vars(conn).pop("call", None)  # the class's own again
    times["next call"] = t1 - t0
    times["hop in"] = marks["start"] - t0
    times["work"] = marks["end"] - marks["start"]
    times["hop back"] = t1 - marks["end"]
    for _ in range(2):  # whatever the case left is done before the next one
        await asyncio.sleep(0.005)
    if counted:
        for part, value in times.items():
            case.seconds[part].append(value)
        case.collections.append(sum(collections.started))
        case.in_claims.append(in_claim.started)
    return held


async def run(args: argparse.Namespace) -> list[Case]:
    payloads = Payloads()
    cases = [Case(name) for name in CASES]
    memory = bytes(range(256)) * (TOUCH // 256)
    with tempfile.TemporaryDirectory(prefix="bench-sqlite-next-call-") as root:
        async with SQLiteStore(Path(root) / "next_call.db") as store:
            await fill(store, "long", history(args.messages, payloads))
            await fill(store, "other", history(10, payloads))
            await store.enqueue("other", Input("send", "waiting", "w"))
            known: Known | None = None
            for index in range(args.warm + args.rounds):
                shift = index % len(cases)
                for case in cases[shift:] + cases[:shift]:
                    known = await one(store, case, known, memory, counted=index >= args.warm)
    return cases


def arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--messages", type=int, default=10_000, help="the long session's length")
    parser.add_argument("--rounds", type=int, default=30, help="counted rounds")
    parser.add_argument("--warm", type=int, default=2, help="uncounted rounds first")
    parser.add_argument("--quick", action="store_true", help="1,000 messages, 8 rounds")
    parser.add_argument("--json", action="store_true", help="one JSON line of figures at the end")
    args = parser.parse_args(argv)
    if args.quick:
        args.messages, args.rounds, args.warm = 1_000, 8, 1
    if args.rounds < 1 or args.warm < 0 or args.messages < 1:
        parser.error("--rounds and --messages are at least 1, --warm at least 0")
    return args


async def main(argv: Sequence[str] | None = None) -> None:
    args = arguments(argv)
    load_before = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    started = time.perf_counter()
    cases = await run(args)
    elapsed = time.perf_counter() - started
    load_after = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print("# The SQLite store's next worker call after a claim\n")
    print(
        machine(
            [
                f"- a session of {args.messages:,} messages of ~1 KB; {args.rounds} counted rounds"
                f" after {args.warm} warm-up, every case once a round in a rotating order;"
                " medians",
                f"- load average before {load_before}, after {load_after}",
            ]
        )
    )
    print()
    base = median(next(c for c in cases if c.name == "held, after").seconds["next call"])
    rows = [
        [
            case.name,
            *(micros(median(case.seconds[p])) for p in PARTS),
            f"{median(case.seconds['next call']) / base:.2f}x",
            str(sum(case.collections)),
            "/".join(str(sum(c[g] for c in case.in_claims)) for g in range(3)),
        ]
        for case in cases
    ]
    headers = [
        "case",
        *(f"{p} µs" for p in PARTS),
        "next call vs held",
        "gc runs in next calls",
        "gc runs in claims (gen 0/1/2)",
    ]
    print(table(headers, rows))
    print(f"\n({elapsed:.0f} s)")
    if args.json:
        found = {
            c.name: {
                **{f"{p}_us": median(c.seconds[p]) * 1e6 if c.seconds[p] else None for p in PARTS},
                "collections": sum(c.collections),
                "collections_in_claims": [sum(x[g] for x in c.in_claims) for g in range(3)],
                "n": len(c.seconds["next call"]),
            }
            for c in cases
        }
        print(json.dumps({"messages": args.messages, "rounds": args.rounds, "cases": found}))


if __name__ == "__main__":
    asyncio.run(main())
