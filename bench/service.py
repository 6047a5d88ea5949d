"""The service: idle wake-ups, steers at a step, turns per second, and the store calls of a turn.

Four measurements, all in one run, on every store that can run here (memory, SQLite, and
Postgres, MySQL/MariaDB and MongoDB when the server answers), with the keyless demo agent
(:mod:`steerable.service.demo`) whose model's ``record`` hook notes each request's time:

1. **Idle wake-up**: from before ``send`` to an idle session until the model's first request
   for it, at ``poll`` 1.0 and 0.1 s. A store that notifies (``Notifying.hints()``: memory,
   Postgres's ``LISTEN``, MongoDB's change stream) runs twice: with its hints, and wrapped so
   it does not look ``Notifying`` (its replica polls). Each send comes at a random phase of
   the replica's poll.
2. **A steer at a step**: a steer while the tool runs, until the model request that carries
   the steer's id; and from the tool's end to that request, against the same for a turn
   nobody steered (what taking a steer adds to a step).
3. **Turns per second** on Postgres, with one replica, three ``Service`` objects in one
   process over three pools, and three ``scripts/service_replica.py`` processes; with the store
   calls per turn, by verb, counted by a wrapper around each replica's store
   (``bench/_service_counting.py``).
4. **The calls of a turn over a bare run**: one unsteered turn served, against the same
   conversation by ``Runner.run`` with a ``Session`` over the same store, by verb.

Configurations are interleaved (every one per round, in a rotating order); figures are
medians. ``--quick`` runs in under a minute. Run: ``python -m bench.service``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Sequence
from pathlib import Path
from typing import TypeVar

from bench import _service_replicas as replicas
from bench._common import machine, median, ratio, table
from bench._service_measure import (
    SteerAtStep,
    TurnCalls,
    Wake,
    steer_configs,
    steer_round,
    turn_calls,
    wake_configs,
    wake_round,
)
from bench._service_stores import MONGODB, POSTGRES, STORES, Target, targets
from steerable.errors import SteerableError

T = TypeVar("T")

CALL_LEASE, CALL_RENEW, CALL_TOOL, CALL_CALLS = 1.0, 0.3, 0.35, 2


def ms(seconds: float) -> str:
    """``seconds`` as milliseconds, one decimal under 100."""
    value = seconds * 1e3
    if value != value:
        return "n/a"
    return f"{value:.1f}" if value < 100 else f"{value:,.0f}"


def _rotated(items: list[T], index: int) -> list[T]:
    shift = index % len(items) if items else 0
    return items[shift:] + items[:shift]


# -- the report ---------------------------------------------------------------------------------


def wake_table(configs: list[Wake]) -> str:
    """Send to first request: median, range, and the ratio to Postgres with its hints."""
    base = {c.poll: median(c.seconds) for c in configs if c.store == POSTGRES and c.hints}
    rows = []
    for c in configs:
        low, high = (min(c.seconds), max(c.seconds)) if c.seconds else (float("nan"),) * 2
        rows.append(
            [
                c.store,
                "hints" if c.hints else "polls",
                f"{c.poll:g}",
                ms(median(c.seconds)),
                ms(median(c.sent)),
                f"{ms(low)} to {ms(high)}",
                ratio(median(c.seconds), base.get(c.poll, float("nan"))),
                str(len(c.seconds)),
            ]
        )
    headers = [
        "store",
        "replica",
        "poll s",
        "ms to request",
        "of which send",
        "range ms",
        "vs Postgres hints",
        "n",
    ]
    return table(headers, rows)


def steer_table(configs: list[SteerAtStep]) -> str:
    """A steer to the request carrying it, and what taking it adds to the step."""
    rows = []
    for c in configs:
        step, plain = median(c.step), median(c.plain_step)
        rows.append(
            [
                c.store,
                ms(median(c.to_request)),
                ms(step),
                ms(plain),
                ratio(step, plain),
                str(len(c.step)),
            ]
        )
    headers = [
        "store",
        "steer -> request ms",
        "step ms, steered",
        "step ms, unsteered",
        "steered / unsteered",
        "n",
    ]
    return table(headers, rows)


VERBS = ("claim", "claim (none)", "step", "end_turn", "renew_many", "hints")


def _rate(mode: replicas.Mode) -> float:
    """The median turns per second of a mode's rounds (all rounds send as many turns)."""
    if not mode.seconds:
        return float("nan")
    per_round = mode.turns / len(mode.seconds)
    return median([per_round / s for s in mode.seconds])


def throughput_table(found: list[replicas.Mode]) -> str:
    """Turns per second and the store calls per turn, by verb."""
    base = _rate(found[0]) if found else float("nan")
    rows = []
    for mode in found:
        rate = _rate(mode)
        turns = max(mode.turns, 1)
        total = sum(mode.calls.values())
        other = total - sum(mode.calls[v] for v in VERBS)
        rows.append(
            [
                mode.name,
                f"{rate:,.0f}",
                ratio(rate, base),
                f"{total / turns:.2f}",
                *(f"{mode.calls[v] / turns:.2f}" for v in VERBS),
                f"{other / turns:.2f}",
            ]
        )
    headers = ["replicas", "turns/s", "vs 1 replica", "calls/turn", *VERBS, "other"]
    others = [
        f"{mode.name}: " + ", ".join(f"{n} {v}" for v, n in mode.calls.items() if v not in VERBS)
        for mode in found
        if any(v not in VERBS for v in mode.calls)
    ]
    return table(headers, rows) + "".join(f"\n\n- other, {line}" for line in others)


def calls_table(found: list[TurnCalls]) -> str:
    """Each verb's calls: a bare run, and one service turn on each store."""
    verbs: list[str] = []
    for f in found:
        for verb in (*f.bare, *f.turn):
            if verb not in verbs:
                verbs.append(verb)
    rows = [[verb, str(found[0].bare[verb]), *(str(f.turn[verb]) for f in found)] for verb in verbs]
    rows.append(
        [
            "total",
            str(sum(found[0].bare.values())),
            *(str(sum(f.turn.values())) for f in found),
        ]
    )
    headers = ["verb", "bare run", *(f"turn, {f.store}" for f in found)]
    return table(headers, rows)


def extra(found: list[TurnCalls]) -> str:
    """One line per store: what the turn adds over the bare run, by verb."""
    lines = []
    for f in found:
        added = Counter(f.turn)
        added.subtract(f.bare)
        words = ", ".join(f"{'+' if n > 0 else ''}{n} {v}" for v, n in added.items() if n)
        lines.append(f"- {f.store} ({f.turn_seconds:.2f} s turn): {words}")
    return "\n".join(lines)


# -- the run ------------------------------------------------------------------------------------


async def run_wakes(found: list[Target], args: argparse.Namespace) -> list[Wake]:
    configs = await wake_configs(found, tuple(args.polls))
    for index in range(args.rounds):
        for config in _rotated(configs, index):
            if config.failed is None:
                limit = 30 + args.samples * (20 + 6 * config.poll)
                config.failed = await _guarded(wake_round(config, args.samples), limit)
    return configs


async def run_steers(found: list[Target], args: argparse.Namespace) -> list[SteerAtStep]:
    configs = await steer_configs(found, args.tool)
    for index in range(args.rounds):
        for config in _rotated(configs, index):
            if config.failed is None:
                limit = 30 + args.samples * 60
                config.failed = await _guarded(steer_round(config, args.samples), limit)
    return configs


async def _guarded(work: Awaitable[None], limit: float) -> str | None:
    """None, or what went wrong: a store that fails (or hangs past ``limit`` seconds) is
    reported, and the others go on."""
    try:
        await asyncio.wait_for(work, limit)
    except TimeoutError as exc:
        return f"TimeoutError: a wait ran out (the round's limit is {limit:.0f} s) {exc}".strip()
    except (AssertionError, SteerableError) as exc:
        return f"{type(exc).__name__}: {exc}"[:300]
    return None


def _progress(started: float, phase: str) -> None:
    print(f"[{time.perf_counter() - started:4.0f} s] {phase}", file=sys.stderr, flush=True)


def arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer rounds: under a minute")
    parser.add_argument("--rounds", type=int, default=4, help="interleaved rounds")
    parser.add_argument("--samples", type=int, default=3, help="samples per config per round")
    parser.add_argument("--polls", type=float, nargs="+", default=[1.0, 0.1], help="poll seconds")
    parser.add_argument("--tool", type=float, default=0.1, help="the steered tool's seconds")
    parser.add_argument("--sessions", type=int, default=24, help="throughput: sessions")
    parser.add_argument("--sends", type=int, default=4, help="throughput: sends per session")
    parser.add_argument("--stores", nargs="+", default=list(STORES), choices=STORES)
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.samples, args.sessions, args.sends = 1, 2, 8, 2
    return args


def _dump_tasks() -> None:
    """On SIGUSR1: every task's stack, to stderr (what a hung run is waiting for)."""
    for task in asyncio.all_tasks():
        print(f"-- {task.get_name()}: {task.get_coro()}", file=sys.stderr)
        task.print_stack(limit=12, file=sys.stderr)
    sys.stderr.flush()


async def main(argv: Sequence[str] | None = None) -> None:
    args = arguments(argv)
    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, _dump_tasks)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-service-") as root:
        async with targets(Path(root), tuple(args.stores)) as (found, notes):
            _progress(started, "idle wake-ups")
            wakes = await run_wakes(found, args)
            _progress(started, "steers at a step")
            steers = await run_steers(found, args)
            _progress(started, "turns per second")
            postgres = [t for t in found if t.name == POSTGRES]
            modes: list[replicas.Mode] = []
            if postgres:
                async with replicas.modes(postgres[0], Path(root)) as modes:
                    failed = await _guarded(
                        replicas.measure(modes, args.rounds, args.sessions, args.sends), 600
                    )
                if failed:
                    notes.append(f"turns per second failed: {failed}")
            else:
                notes.append("turns per second skipped: it runs on Postgres")
            _progress(started, "the calls of a turn")
            calls = []
            for target in found:
                try:
                    work = turn_calls(
                        target,
                        calls=CALL_CALLS,
                        tool=CALL_TOOL,
                        lease=CALL_LEASE,
                        renew_every=CALL_RENEW,
                    )
                    calls.append(await asyncio.wait_for(work, 120))
                except (AssertionError, SteerableError, TimeoutError) as exc:
                    notes.append(f"{target.name}: the calls of a turn failed: {exc}"[:300])
    for wake in wakes:
        if wake.failed:
            notes.append(f"{wake.store}, poll {wake.poll:g}: a wake-up failed: {wake.failed}")
    for steer in steers:
        if steer.failed:
            notes.append(f"{steer.store}: a steer at a step failed: {steer.failed}")
    servers = [f"- {t.name}: {t.server}" for t in found if t.server]
    print("# The service\n")
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    header = [f"- {args.rounds} rounds, {args.samples} samples per round; load at the end {load}"]
    print(machine([*header, *servers]))
    print("\n## Idle wake-up: send to the first model request\n")
    print(wake_table(wakes))
    print(f"\n## A steer at a step (a tool of {args.tool:g} s)\n")
    print(steer_table(steers))
    if modes:
        print(
            f"\n## Turns per second on Postgres ({args.sessions} sessions x {args.sends} sends"
            " per round; calls per turn by verb)\n"
        )
        print(throughput_table(modes))
    print(
        f"\n## The calls of one unsteered turn ({CALL_CALLS} tool calls of {CALL_TOOL:g} s,"
        f" lease {CALL_LEASE:g} s renewed every {CALL_RENEW:g} s) over a bare run\n"
    )
    if calls:
        print(calls_table(calls))
        print()
        print(extra(calls))
    for note in notes:
        print(f"\n- {note}")
    if any(t.name == MONGODB for t in found):
        print("\n- MongoDB rows: see the server line above; SecantusDB's speed is not MongoDB's.")
    print(f"\n({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    asyncio.run(main())
