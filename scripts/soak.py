"""A soak of ``steerable serve`` (issue 18): replicas under a steady load for a long time,
their memory and database connections sampled, to see that nothing grows.

    python scripts/soak.py [--store postgres] [--minutes 60] [--short] [--replicas 3]
        [--rate 5] [--sessions 20] [--every 10] [--out FILE.jsonl]

``--replicas`` ``steerable serve`` processes (3) over one fresh database (Postgres by
default), behind nothing: each request goes to a replica picked at random. The demo agent
makes two tool calls of 0.2 s a turn. For ``--minutes`` (60; ``--short``: 1) inputs arrive
at ``--rate`` a second (Poisson), 60% sends and 40% steers, each to a random session of the
current generation: ``--sessions`` sessions, a new generation every 2 minutes (so
sessions keep coming and none grows without end, as in a service with users). After each
send a client waits for its turn (``GET .../turns/{tid}?wait=30``, from a random replica
too). No faults: nothing is killed.

Every ``--every`` seconds (10) each replica's resident memory (``VmRSS``, from ``/proc``)
and its open database connections are sampled: its established TCP connections to the
database's port, and on Postgres the rows of ``pg_stat_activity`` whose ``client_port`` is
one of them. Each sample is also appended to ``--out`` as a JSON line as it is taken (for a
long run in the background). At the end it prints one JSON line: every sample, and per
replica the slope of its memory in MB a minute after the warm-up (the first 20% of the
samples), the answers by status, the turns by state and the turns' latency; it exits 1 on
any 5xx or a turn that failed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the helper beside this script

import httpx
from _serve_procs import (
    STORES,
    Scratch,
    Serve,
    db_ports,
    emit,
    median,
    note,
    scratch_store,
    serving,
    slope,
)

GENERATION_S = 120.0  # a new set of sessions this often
TOOL_S = 0.2
IN_FLIGHT = 200  # requests under way at most (beyond: the load generator waits)


def _arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--store", choices=STORES, default="postgres")
    add("--short", action="store_true", help="one minute")
    add("--minutes", type=float, default=None, help="minutes of load (60; short: 1)")
    add("--replicas", type=int, default=3)
    add("--rate", type=float, default=5.0, help="inputs a second, all replicas together")
    add("--sessions", type=int, default=20, help="sessions of each generation")
    add("--every", type=float, default=10.0, help="seconds between samples")
    add("--out", type=Path, default=None, help="append each sample to this JSON lines file")
    add("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    if args.minutes is None:
        args.minutes = 1.0 if args.short else 60.0
    if args.minutes <= 0 or args.every <= 0 or args.rate <= 0 or args.replicas < 1:
        parser.error("--minutes, --every, --rate are > 0 and --replicas >= 1")
    return args


class Load:
    """The clients: what they sent and what they were answered."""

    def __init__(self, urls: list[str], args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        limits = httpx.Limits(max_connections=IN_FLIGHT, max_keepalive_connections=50)
        self.clients = [httpx.AsyncClient(base_url=u, timeout=60, limits=limits) for u in urls]
        self.answers: Counter[str] = Counter()
        self.turns: Counter[str] = Counter()
        self.latencies: list[float] = []
        self.tasks: set[asyncio.Task[None]] = set()
        self.gate = asyncio.Semaphore(IN_FLIGHT)

    async def close(self) -> None:
        """Wait for the requests under way (a minute at most), then close the clients."""
        if self.tasks:
            await asyncio.wait(self.tasks, timeout=60)
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for client in self.clients:
            await client.aclose()

    def _client(self) -> httpx.AsyncClient:
        return self.rng.choice(self.clients)

    async def run(self, seconds: float) -> None:
        """Inputs at ``--rate`` a second for ``seconds``."""
        started = time.monotonic()
        n = 0
        while (elapsed := time.monotonic() - started) < seconds:
            generation = int(elapsed // GENERATION_S)
            sid = f"g{generation}-s{self.rng.randrange(self.args.sessions)}"
            kind = "messages" if self.rng.random() < 0.6 else "steers"
            await self.gate.acquire()
            task = asyncio.create_task(self._input(sid, kind, f"input {n}"))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
            n += 1
            await asyncio.sleep(self.rng.expovariate(self.args.rate))

    async def _input(self, sid: str, kind: str, text: str) -> None:
        try:
            began = time.time()
            answer = await self._client().post(f"/v1/sessions/{sid}/{kind}", json={"text": text})
            self.answers[f"{kind} {answer.status_code}"] += 1
            if kind == "messages" and answer.status_code == 202:
                await self._follow(sid, answer.json()["turn"], began)
        except httpx.HTTPError as exc:
            self.answers[f"{kind} error {type(exc).__name__}"] += 1
        finally:
            self.gate.release()

    async def _follow(self, sid: str, tid: str, began: float) -> None:
        for _ in range(10):
            answer = await self._client().get(
                f"/v1/sessions/{sid}/turns/{tid}", params={"wait": 30}
            )
            self.answers[f"turn {answer.status_code}"] += 1
            turn = answer.json() if answer.status_code == 200 else None
            if turn is not None and turn["state"] not in ("queued", "running"):
                self.turns[turn["state"]] += 1
                if turn["ended_at"] is not None:
                    self.latencies.append(turn["ended_at"] - began)
                return
        self.turns["not ended"] += 1


async def _pg_connections(admin: Any, scratch: Scratch) -> tuple[int, dict[int, int]]:
    """Every connection to the run's database but this one, and how many per client port."""
    rows = await admin.fetch(
        "SELECT client_port FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
        scratch.name,
    )
    ports = Counter(int(r["client_port"]) for r in rows if r["client_port"] is not None)
    return len(rows), dict(ports)


async def _sample(servers: list[Serve], scratch: Scratch, admin: Any, at: float) -> dict[str, Any]:
    total, pg_ports = (None, {}) if admin is None else await _pg_connections(admin, scratch)
    replicas = []
    for server in servers:
        memory = server.memory()
        ports = [] if scratch.port is None else db_ports(server.pid, scratch.port)
        counted = None if scratch.port is None else len(ports)  # SQLite: a file, no connections
        replica: dict[str, Any] = {"rss_mb": memory.rss_mb, "db_connections": counted}
        if admin is not None:
            replica["pg_stat_activity"] = sum(pg_ports.get(p, 0) for p in ports)
        replicas.append(replica)
    return {"t_s": round(at, 1), "replicas": replicas, "db_total": total}


async def _sampling(
    servers: list[Serve],
    scratch: Scratch,
    args: argparse.Namespace,
    samples: list[dict[str, Any]],
    until: float,
    started: float,
) -> None:
    admin = None
    if scratch.kind == "postgres":
        import asyncpg  # type: ignore[import-untyped]
        from _serve_procs import PG_DSN

        admin = await asyncpg.connect(PG_DSN, timeout=10)
    try:
        while True:
            sample = await _sample(servers, scratch, admin, time.monotonic() - started)
            samples.append(sample)
            note(f"sample {json.dumps(sample)}")
            if args.out is not None:
                with args.out.open("a") as out:
                    out.write(json.dumps(sample) + "\n")
            if time.monotonic() + args.every > until + 0.5:
                return
            await asyncio.sleep(args.every)
    finally:
        if admin is not None:
            await admin.close()


def _slopes(samples: list[dict[str, Any]], replicas: int) -> list[float | None]:
    """Per replica, its memory's slope in MB a minute over the samples after the warm-up."""
    kept = samples[len(samples) // 5 :]
    out: list[float | None] = []
    for index in range(replicas):
        points = [(s["t_s"] / 60, s["replicas"][index]["rss_mb"]) for s in kept]
        rate = slope(points)
        out.append(None if rate is None else round(rate, 3))
    return out


async def _soak(args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    seconds = args.minutes * 60
    async with (
        scratch_store(args.store, directory) as scratch,
        contextlib.AsyncExitStack() as stack,
    ):
        servers = [
            await stack.enter_async_context(
                serving(scratch, directory, tag=f"soak-{n}", tool_seconds=TOOL_S)
            )
            for n in range(args.replicas)
        ]
        load = Load([s.url for s in servers], args)
        samples: list[dict[str, Any]] = []
        started = time.monotonic()
        try:
            await asyncio.gather(
                load.run(seconds),
                _sampling(servers, scratch, args, samples, started + seconds, started),
            )
        finally:
            await load.close()
        final = await _sample(servers, scratch, None, time.monotonic() - started)
    return _figures(args, samples, final, load)


def _figures(
    args: argparse.Namespace, samples: list[dict[str, Any]], final: dict[str, Any], load: Load
) -> dict[str, Any]:
    kept = samples[len(samples) // 5 :]
    first = [r["rss_mb"] for r in kept[0]["replicas"]] if kept else []
    last = [r["rss_mb"] for r in kept[-1]["replicas"]] if kept else []
    connections = [r["db_connections"] for s in samples for r in s["replicas"]]
    connections = [n for n in connections if n is not None]
    return {
        "store": args.store,
        "replicas": args.replicas,
        "minutes": args.minutes,
        "rate_per_s": args.rate,
        "every_s": args.every,
        "rss_start_mb": [r["rss_mb"] for r in samples[0]["replicas"]] if samples else [],
        "rss_after_warmup_mb": first,
        "rss_end_mb": last,
        "rss_slope_mb_per_min": _slopes(samples, args.replicas),
        "db_connections_min_max": [min(connections), max(connections)] if connections else [],
        "db_total_max": max((s["db_total"] or 0 for s in samples), default=None),
        "answers": dict(sorted(load.answers.items())),
        "server_errors": sum(n for k, n in load.answers.items() if " 5" in k),
        "turns": dict(sorted(load.turns.items())),
        "turn_seconds_median": _rounded(median(load.latencies)),
        "turn_seconds_max": _rounded(max(load.latencies, default=0.0)),
        "after_drain": final,
        "samples": samples,
    }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def main(argv: list[str] | None = None) -> int:
    """Soak; print the figures as one JSON line."""
    args = _arguments(argv)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    with tempfile.TemporaryDirectory(prefix="steerable-soak-") as directory:
        figures = asyncio.run(_soak(args, Path(directory)))
    figures["date"] = started
    emit(figures)
    failed = figures["server_errors"] or figures["turns"].get("failed", 0)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
