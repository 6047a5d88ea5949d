"""How long a stop takes to reach the turn it stops, per store (issue 18), through a real
``steerable serve`` with serve's default settings (lease 15 s, renewed every 5 s; the stop
poll every 0.2 s where the store has no notifications).

    python scripts/stop_latency.py [--stores sqlite,postgres,mysql,mongodb] [--samples N]
        [--short]

For each store, a serve process over a fresh database runs the demo agent, whose tool
takes an hour. ``--samples`` sessions (10; ``--short``: 3) are each sent a message; once a
session's turn runs its tool, a random moment later (uniform over the renewal's period, so
over the renewal's and the poll's phases alike) its stop is posted, and the turn is
watched with ``GET .../turns/{tid}?wait=0.1`` until it is ``stopped``. A sample is the
time from before the POST to the turn's ``ended_at`` (the database's clock, on this
machine) and, as the client saw it, to the answer that says ``stopped`` (up to ~0.05 s
later: the wait's own polling). The samples of one store run at once, in one replica.

Then the same with ``--stop-poll 1000000``: what a stop took before the poll, when only the
lease's renewal carried it (about a renewal's period at most; Postgres and MongoDB are told
at once by their notifications either way).

It prints one JSON line: per store and setting the median and the largest latency, and the
samples; it exits 1 if a turn did not stop.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the helper beside this script

import httpx
from _serve_procs import STORES, Scratch, emit, median, note, scratch_store, serving

LEASE = 15.0  # serve's default --lease
RENEW = LEASE / 3  # the service's default renewal
SETTINGS: dict[str, tuple[str, ...]] = {
    "stop_poll": (),  # serve's defaults: --stop-poll 0.2
    "renewal_only": ("--stop-poll", "1000000"),  # before: the renewal carried the stop
}


def _arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--stores", default=",".join(STORES), help="comma separated: " + ", ".join(STORES))
    add("--samples", type=int, default=None, help="stops per store and setting (10; short: 3)")
    add("--short", action="store_true", help="3 samples each")
    add("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    args.stores = [s for s in args.stores.split(",") if s]
    if unknown := set(args.stores) - set(STORES):
        parser.error(f"unknown stores: {', '.join(sorted(unknown))}")
    if args.samples is None:
        args.samples = 3 if args.short else 10
    return args


async def _running(http: httpx.AsyncClient, sid: str) -> None:
    for _ in range(1200):
        answer = await http.get(f"/v1/sessions/{sid}")
        if answer.status_code == 200:
            turn = answer.json()["turn"]
            if turn is not None and turn["state"] == "running" and turn["steps"] >= 1:
                return
        await asyncio.sleep(0.05)
    raise RuntimeError(f"the turn of {sid} never ran")


async def _sample(http: httpx.AsyncClient, sid: str, rng: random.Random) -> dict[str, Any]:
    """One stop: sent, then watched until the turn is stopped."""
    sent = await http.post(f"/v1/sessions/{sid}/messages", json={"text": "a long job"})
    tid = sent.json()["turn"]
    await _running(http, sid)
    await asyncio.sleep(rng.uniform(0.0, RENEW))
    began_wall, began = time.time(), time.monotonic()
    stopped = await http.post(f"/v1/sessions/{sid}/stop")
    assert stopped.json()["turn"] == tid, stopped.text
    deadline = began + 3 * LEASE
    while time.monotonic() < deadline:
        turn = (await http.get(f"/v1/sessions/{sid}/turns/{tid}", params={"wait": 0.1})).json()
        if turn["state"] != "running":
            seen = time.monotonic() - began
            ended = turn["ended_at"]
            return {
                "state": turn["state"],
                "seconds": round(ended - began_wall, 3) if ended is not None else None,
                "seen_seconds": round(seen, 3),
            }
    return {"state": "running", "seconds": None, "seen_seconds": None}


async def _setting(
    scratch: Scratch, directory: Path, name: str, samples: int, rng: random.Random
) -> dict[str, Any]:
    flags = SETTINGS[name]
    async with (
        serving(scratch, directory, *flags, tag=f"{scratch.kind}-{name}") as server,
        httpx.AsyncClient(base_url=server.url, timeout=60) as http,
    ):
        results = await asyncio.gather(*(_sample(http, f"{name}-{n}", rng) for n in range(samples)))
    latencies = [r["seconds"] for r in results if r["state"] == "stopped" and r["seconds"]]
    seen = [r["seen_seconds"] for r in results if r["state"] == "stopped"]
    figures = {
        "flags": list(flags),
        "samples": len(results),
        "stopped": sum(r["state"] == "stopped" for r in results),
        "median_s": _rounded(median(latencies)),
        "max_s": max(latencies) if latencies else None,
        "seen_median_s": _rounded(median(seen)),
        "seen_max_s": max(seen) if seen else None,
        "latencies_s": sorted(latencies),
    }
    note(f"{scratch.kind} {name}: {figures}")
    return figures


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    figures: dict[str, Any] = {"lease_s": LEASE, "renew_every_s": RENEW, "stop_poll_s": 0.2}
    stores: dict[str, Any] = {}
    started = time.monotonic()
    for kind in args.stores:
        with tempfile.TemporaryDirectory(prefix=f"steerable-stop-{kind}-") as scratch_dir:
            directory = Path(scratch_dir)
            async with scratch_store(kind, directory) as scratch:
                stores[kind] = {
                    name: await _setting(scratch, directory, name, args.samples, rng)
                    for name in SETTINGS
                }
    figures["stores"] = stores
    figures["run_seconds"] = round(time.monotonic() - started, 1)
    figures["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return figures


def main(argv: list[str] | None = None) -> int:
    """Measure each store's stops; print the figures as one JSON line."""
    args = _arguments(argv)
    figures = asyncio.run(_main(args))
    emit(figures)
    every = [s for store in figures["stores"].values() for s in store.values()]
    return 0 if all(s["stopped"] == s["samples"] for s in every) else 1


if __name__ == "__main__":
    raise SystemExit(main())
