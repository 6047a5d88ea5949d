"""What one Postgres primary spends per service turn and per lease renewal (issue 24).

The figures a paper estimate of a primary's capacity is built from (docs/benchmarks.md,
"What one Postgres primary carries"). Postgres only, on a new database dropped at the end
(``bench/_servers.py`` says where the server is). The database's CPU is read from ``/proc``
(``bench/_pg_cpu.py``), so it is measured only when the server runs on this machine; the
other figures are measured anywhere.

1. **Turns.** One :class:`~steerable.service.Service` replica (``concurrency`` 16, its hints
   on ``LISTEN``, over its own pool of 18 connections) runs the demo agent
   (:func:`~steerable.service.demo.demo_agent`, one ``work`` call of 0 s a turn: a turn is
   the claim, which makes the prompt's step, one step, the tool's call and result, and the
   end, which stores the answer). A front door (a
   ``Service`` with no agent, over its own pool of 4, in a thread of its own with its own
   event loop) sends ``sessions x sends`` turns a round: each session's sends in order, a
   random pause of up to ``--pause`` seconds between two, the sessions at once, so some
   sends find their session idle and some find a turn running (both counted). A send's text
   is ~1 KB of words, and the demo's answer repeats it. A round is timed from the first
   send until the replica has ended every turn (an observer counts them). Per round:
   turns/s; the store calls of the replica and of the front door, by verb (a counting
   wrapper, ``bench/_service_counting.py``); the CPU of the replica (this process's
   ``process_time`` less the front door thread's ``thread_time``) and of the front door;
   the CPU of the database's backends serving the replica's pool and the front door's
   (utime + stime of each backend process, read before and after; the pools keep their
   connections for the whole run); and the WAL the server wrote (``pg_current_wal_lsn``,
   server-wide: other tenants' writes add to it, so the median over rounds is reported).
2. **Renewals.** ``--leases`` sessions, each with a turn claimed and held by one holder; each
   pass renews every lease once: with ``renew`` (one lease a call, 16 calls at once over the
   replica's pool, as each running turn renews its own), and, where the store has
   ``renew_many``, with calls of ``--batches`` leases each, one call at a time (as one
   replica renews all it holds). Per pass: leases/s, the client's CPU, the database
   backends' CPU and the WAL per call and per lease. The modes are interleaved (a rotating
   order each pass).

The database's CPU ("DB CPU") is that of this run's backends only. The WAL writer, the
checkpointer and the background writer work for every database at once: their CPU is shown
apart ("WAL writer etc."), server-wide. Not in any figure: autovacuum (its workers come and
go), the kernel's work outside the processes (the disk's own flushing), and a network
between machines (here a loopback). Figures are medians over the rounds (turns) and passes
(renewals); the last table turns them into a paper estimate of what a primary of 8 and 32
vCPUs carries at 70% CPU, as if each vCPU did what a core does here.

``python -m bench.capacity`` (about 30 s here); ``--quick`` (seconds); ``--json`` (one
JSON line of the figures at the end).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from bench._common import Payloads, machine, median, table, version
from bench._pg_cpu import Backends, pids, spent, wal_lsn
from bench._servers import (
    PG_HOST,
    PG_PORT,
    PG_USER,
    Database,
    Unavailable,
    driver,
    postgres_database,
    postgres_pool,
    steerable_postgres,
)
from bench._service_counting import Counting, counting
from steerable.service import Service, TurnReport
from steerable.service.demo import demo_agent
from steerable.service_store import Claim, Input, Lease

T = TypeVar("T")

CONCURRENCY = 16
REPLICA_POOL = CONCURRENCY + 2  # the turns' calls, the LISTEN connection, one spare
FRONT_POOL = 4
LEASE = 15.0  # the Service's default: renewed every 5 s
HOLD = 300.0  # the renewal phase's leases: none expires while it runs
WRITES = frozenset(
    {
        "enqueue",
        "claim",
        "step",
        "end_turn",
        "renew",
        "renew_many",
        "save",
        "steer",
        "take_steers",
        "cancel",
        "stop",
        "set_metadata",
    }
)  # each is one transaction that writes, so one commit (``claim (none)`` writes nothing)
VERBS = ("enqueue", "claim", "claim (none)", "step", "end_turn", "renew", "hints")
RENEW_EVERY = LEASE / 3
UTILIZATION = 0.7
CORES = (8, 32)


# -- the front door, in a thread of its own -------------------------------------------------------


@dataclass
class Sent:
    """One round of sends: how many found their session idle and busy, the thread's CPU."""

    idle: int
    busy: int
    cpu: float


class Front:
    """A ``Service`` with no agent over its own pool, on an event loop in its own thread, so
    its CPU (``time.thread_time`` there) is told apart from the replica's."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="front", daemon=True)
        self.pool: Any = None
        self.store: Counting
        self.service: Service
        self.pids: list[int] = []

    def call(self, work: Coroutine[Any, Any, T]) -> Awaitable[T]:
        """Run ``work`` on the front door's loop; await its result from another loop."""
        return asyncio.wrap_future(asyncio.run_coroutine_threadsafe(work, self.loop))

    async def open(self) -> None:
        self.thread.start()
        await self.call(self._open())

    async def _open(self) -> None:
        self.pool = await postgres_pool(self.db, FRONT_POOL)
        self.store = counting(await steerable_postgres(self.pool))
        self.service = Service(self.store)
        self.pids = await pids(self.pool, FRONT_POOL)

    async def close(self) -> None:
        if self.pool is not None:
            await self.call(self.pool.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    async def send_round(
        self, tag: str, sessions: int, sends: int, pause: float, texts: list[str]
    ) -> Sent:
        """``sessions x sends`` sends, each session's in order with random pauses."""
        started = time.thread_time()
        found = Counter[bool]()
        rng = random.Random(tag)

        async def one(number: int, pauses: list[float]) -> None:
            session = f"cap-{tag}-{number}"
            for index in range(sends):
                text = texts[(number * sends + index) % len(texts)]
                accepted = await self.service.send(session, text)
                found[accepted.ahead == 0] += 1
                if index < sends - 1:
                    await asyncio.sleep(pauses[index])

        plan = [[rng.uniform(0, pause) for _ in range(sends)] for _ in range(sessions)]
        await asyncio.gather(*(one(s, plan[s]) for s in range(sessions)))
        return Sent(found[True], found[False], time.thread_time() - started)


# -- 1. turns -------------------------------------------------------------------------------------


class Ended:
    """An observer counting the turns this replica ended; :meth:`reach` waits for a count."""

    def __init__(self) -> None:
        self.count = 0
        self.states: Counter[str] = Counter()
        self._target = 0
        self._reached = asyncio.Event()

    def claimed(self, claim: Claim) -> None:
        pass

    def steers_taken(self, session: str, turn: str, waits: Sequence[float]) -> None:
        pass

    def fenced(self, session: str) -> None:
        pass

    def turn_ended(self, report: TurnReport) -> None:
        self.count += 1
        self.states[report.state] += 1
        if self.count >= self._target:
            self._reached.set()

    async def reach(self, target: int, seconds: float) -> None:
        self._target = target
        self._reached.clear()
        if self.count < target:
            await asyncio.wait_for(self._reached.wait(), seconds)


@dataclass
class Round:
    """One counted round of turns and what it spent."""

    turns: int
    seconds: float
    idle: int
    busy: int
    replica_cpu: float
    front_cpu: float
    db_cpu: dict[str, float]
    wal: int
    calls: Counter[str]  # the replica's and the front door's

    def per_turn(self) -> dict[str, float]:
        n = self.turns
        return {
            "turns_per_s": n / self.seconds,
            "replica_cpu_ms": self.replica_cpu / n * 1e3,
            "front_cpu_ms": self.front_cpu / n * 1e3,
            "db_cpu_ms": self.db_cpu.get("all", float("nan")) / n * 1e3,
            "db_cpu_replica_ms": self.db_cpu.get("replica", 0.0) / n * 1e3,
            "db_cpu_front_ms": self.db_cpu.get("front", 0.0) / n * 1e3,
            "db_cpu_shared_ms": self.db_cpu.get("shared", float("nan")) / n * 1e3,
            "wal_bytes": self.wal / n,
            "calls": sum(self.calls.values()) / n,
            "commits": sum(c for v, c in self.calls.items() if v in WRITES) / n,
        }


@dataclass
class Probe:
    """What the measurements read: the backends, a connection for the WAL position."""

    backends: Backends
    observer: Any  # an asyncpg connection to another database, so it is not counted

    async def reading(self) -> tuple[float, dict[str, float], int]:
        """(this process's CPU, the backends' CPU by role, the WAL position)."""
        return time.process_time(), self.backends.seconds(), await wal_lsn(self.observer)


async def turns_phase(
    args: argparse.Namespace, store: Counting, front: Front, probe: Probe, texts: list[str]
) -> tuple[list[Round], Counter[str]]:
    """The warm-up round and the counted rounds; the turns' end states."""
    ended = Ended()
    service = Service(
        store,
        demo_agent(seconds=0.0, calls=1),
        replica="capacity",
        concurrency=CONCURRENCY,
        lease=LEASE,
        observers=[ended],
    )
    rounds: list[Round] = []
    async with service.serving():
        await asyncio.sleep(0.3)  # the listener is up, the first claim made
        for index in range(args.warm + args.rounds):
            counted = index >= args.warm
            sessions = args.sessions if counted else max(2, args.sessions // 4)
            target = ended.count + sessions * args.sends
            store.calls.clear()
            front.store.calls.clear()
            cpu0, db0, wal0 = await probe.reading()
            start = time.perf_counter()
            tag = f"{index}-{uuid.uuid4().hex[:6]}"
            sent = await front.call(front.send_round(tag, sessions, args.sends, args.pause, texts))
            await ended.reach(target, 300)
            seconds = time.perf_counter() - start
            cpu1, db1, wal1 = await probe.reading()
            if counted:
                rounds.append(
                    Round(
                        sessions * args.sends,
                        seconds,
                        sent.idle,
                        sent.busy,
                        cpu1 - cpu0 - sent.cpu,
                        sent.cpu,
                        spent(db0, db1),
                        wal1 - wal0,
                        store.calls + front.store.calls,
                    )
                )
            _progress(f"turns: round {index + 1} of {args.warm + args.rounds}")
    return rounds, ended.states


# -- 2. renewals ----------------------------------------------------------------------------------


@dataclass
class Mode:
    """One way of renewing every lease once a pass, and what each pass spent."""

    name: str
    batch: int  # leases a call (1: renew)
    passes: list[dict[str, float]] = field(default_factory=list)


async def hold(store: Any, count: int, texts: list[str]) -> list[Lease]:
    """``count`` sessions, each with a send claimed by one holder for :data:`HOLD` seconds."""
    tag = uuid.uuid4().hex[:6]
    leases: list[Lease] = []
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(index: int) -> None:
        session = f"renew-{tag}-{index}"
        async with gate:
            await store.enqueue(session, Input("send", texts[index % len(texts)], f"in-{index}"))
            claim = await store.claim("renewer", seconds=HOLD, cap=16, session=session)
        if claim is None:
            raise AssertionError(f"the send of {session} was not claimed")
        leases.append(claim.lease)

    await asyncio.gather(*(one(i) for i in range(count)))
    return leases


async def renew_pass(store: Any, mode: Mode, leases: list[Lease]) -> int:
    """Renew every lease once as ``mode`` does; the calls made."""
    if mode.batch == 1:
        queue = list(leases)

        async def worker() -> None:
            while queue:
                await store.renew(queue.pop(), seconds=HOLD)

        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
        return len(leases)
    calls = 0
    for at in range(0, len(leases), mode.batch):
        answers = await store.renew_many(leases[at : at + mode.batch], seconds=HOLD)
        if any(a is None for a in answers):
            raise AssertionError("renew_many found a lease stale that nobody took")
        calls += 1
    return calls


async def renew_phase(
    args: argparse.Namespace, store: Any, probe: Probe, texts: list[str]
) -> tuple[list[Mode], list[str]]:
    """Hold ``--leases`` leases and renew them, every mode in turn, ``--passes`` times."""
    notes: list[str] = []
    modes = [Mode(f"renew, {CONCURRENCY} calls at once", 1)]
    if callable(getattr(store, "renew_many", None)):
        modes += [Mode(f"renew_many of {n}", n) for n in args.batches if n <= args.leases]
    else:
        notes.append("renew_many: this steerable's Postgres store has none, so not measured")
    leases = await hold(store, args.leases, texts)
    _progress(f"renewals: {len(leases)} leases held")
    for mode in modes:  # one warm-up pass each
        await renew_pass(store, mode, leases)
    for index in range(args.passes):
        shift = index % len(modes)
        for mode in modes[shift:] + modes[:shift]:
            cpu0, db0, wal0 = await probe.reading()
            start = time.perf_counter()
            calls = await renew_pass(store, mode, leases)
            seconds = time.perf_counter() - start
            cpu1, db1, wal1 = await probe.reading()
            n = len(leases)
            db = spent(db0, db1).get("all", float("nan"))
            mode.passes.append(
                {
                    "leases_per_s": n / seconds,
                    "calls_per_s": calls / seconds,
                    "client_cpu_us_per_lease": (cpu1 - cpu0) / n * 1e6,
                    "db_cpu_us_per_call": db / calls * 1e6,
                    "db_cpu_us_per_lease": db / n * 1e6,
                    "shared_cpu_us_per_lease": spent(db0, db1).get("shared", float("nan"))
                    / n
                    * 1e6,
                    "wal_bytes_per_call": (wal1 - wal0) / calls,
                    "wal_bytes_per_lease": (wal1 - wal0) / n,
                }
            )
        _progress(f"renewals: pass {index + 1} of {args.passes}")
    return modes, notes


# -- the run --------------------------------------------------------------------------------------


def _progress(what: str) -> None:
    print(f"[{time.perf_counter() - STARTED:5.1f} s] {what}", file=sys.stderr, flush=True)


STARTED = time.perf_counter()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Both phases on a new database; the figures, or ``{"skipped": why}``."""
    asyncpg = driver("asyncpg", "postgres")
    payloads = Payloads()
    texts = [payloads.text(1000) for _ in range(64)]
    async with postgres_database("capacity") as db:
        pool = await postgres_pool(db, REPLICA_POOL)
        front = Front(db)
        observer = await asyncpg.connect(
            host=PG_HOST, port=PG_PORT, user=PG_USER, database="postgres"
        )
        try:
            inner = await steerable_postgres(pool)
            store = counting(inner)
            await front.open()
            roles = dict.fromkeys(await pids(pool, REPLICA_POOL), "replica")
            roles |= dict.fromkeys(front.pids, "front")
            backends = Backends(db.name, roles)
            notes: list[str] = []
            if not set(roles) <= set(backends.find()):
                notes.append(
                    "the database's CPU is not measured: its backends are not processes of"
                    " this machine (or /proc is not readable)"
                )
            probe = Probe(backends, observer)
            server = str(await observer.fetchval("SHOW server_version"))
            settings = {
                name: str(await observer.fetchval(f"SHOW {name}"))
                for name in ("synchronous_commit", "fsync", "wal_sync_method", "shared_buffers")
            }
            _progress("turns")
            rounds, states = await turns_phase(args, store, front, probe, texts)
            _progress("renewals")
            modes, more = await renew_phase(args, inner, probe, texts)
            notes += more
            notes += [f"the database's {c}" for c in backends.changed]
        finally:
            await observer.close()
            await front.close()
            await pool.close()
    return {
        "server": f"Postgres {server}",
        "settings": settings,
        "rounds": rounds,
        "states": dict(states),
        "modes": modes,
        "notes": notes,
    }


# -- the report -----------------------------------------------------------------------------------


def turn_figures(rounds: list[Round]) -> dict[str, Any]:
    """The medians over rounds of the per-turn figures, and the calls by verb over all."""
    per = [r.per_turn() for r in rounds]
    calls = sum((r.calls for r in rounds), Counter[str]())
    turns = sum(r.turns for r in rounds)
    return {
        "median": {k: median([p[k] for p in per]) for k in per[0]} if per else {},
        "rounds": per,
        "calls_by_verb": {v: n / turns for v, n in sorted(calls.items())} if turns else {},
        "turns": turns,
        "idle_sends": sum(r.idle for r in rounds),
        "busy_sends": sum(r.busy for r in rounds),
    }


def renew_figures(modes: list[Mode]) -> dict[str, dict[str, float]]:
    """Per mode, the medians over passes."""
    return {
        m.name: {k: median([p[k] for p in m.passes]) for k in m.passes[0]} | {"batch": m.batch}
        for m in modes
        if m.passes
    }


def estimate(turns: dict[str, Any], renews: dict[str, dict[str, float]]) -> dict[str, Any]:
    """What a primary of each size in :data:`CORES` carries at :data:`UTILIZATION` of its
    CPU, if its vCPU does what a core here does and CPU is what runs out first."""
    med = turns["median"]
    db_turn = med.get("db_cpu_ms", float("nan")) / 1e3
    single = next((r for r in renews.values() if r["batch"] == 1), None)
    batched = max(
        (r for r in renews.values() if r["batch"] > 1), key=lambda r: r["batch"], default=None
    )
    found: dict[str, Any] = {}
    for cores in CORES:
        budget = UTILIZATION * cores  # CPU seconds a second
        rate = budget / db_turn
        entry: dict[str, Any] = {
            "turns_per_s": rate,
            "commits_per_s": rate * med["commits"],
            "wal_mb_per_s": rate * med["wal_bytes"] / 1e6,
        }
        if single is not None:
            per_running = single["db_cpu_us_per_call"] / 1e6 / RENEW_EVERY
            entry["running_turns_renew"] = budget / per_running
        if batched is not None:
            per_running = batched["db_cpu_us_per_lease"] / 1e6 / RENEW_EVERY
            entry["running_turns_batched"] = budget / per_running
            entry["batch"] = batched["batch"]
        found[str(cores)] = entry
    return found


def _f(value: float, digits: int = 2) -> str:
    if value != value:
        return "n/a"
    return f"{value:,.{digits}f}"


def turns_table(rounds: list[Round], figures: dict[str, Any]) -> str:
    rows = []
    for index, (r, p) in enumerate(zip(rounds, figures["rounds"], strict=True)):
        rows.append(
            [
                str(index + 1),
                f"{r.turns} ({r.idle} idle, {r.busy} busy)",
                _f(p["turns_per_s"], 0),
                _f(p["calls"]),
                _f(p["commits"]),
                _f(p["replica_cpu_ms"]),
                _f(p["front_cpu_ms"]),
                _f(p["db_cpu_replica_ms"]),
                _f(p["db_cpu_front_ms"]),
                _f(p["db_cpu_ms"]),
                _f(p["db_cpu_shared_ms"]),
                _f(p["wal_bytes"], 0),
            ]
        )
    m = figures["median"]
    rows.append(
        [
            "median",
            "",
            _f(m["turns_per_s"], 0),
            _f(m["calls"]),
            _f(m["commits"]),
            _f(m["replica_cpu_ms"]),
            _f(m["front_cpu_ms"]),
            _f(m["db_cpu_replica_ms"]),
            _f(m["db_cpu_front_ms"]),
            _f(m["db_cpu_ms"]),
            _f(m["db_cpu_shared_ms"]),
            _f(m["wal_bytes"], 0),
        ]
    )
    headers = [
        "round",
        "turns (sends found the session)",
        "turns/s",
        "store calls/turn",
        "commits/turn",
        "replica CPU ms/turn",
        "front door CPU ms/send",
        "DB CPU ms/turn, replica's",
        "DB CPU ms/turn, front door's",
        "DB CPU ms/turn, all",
        "WAL writer etc. ms/turn (server-wide)",
        "WAL B/turn (server-wide)",
    ]
    return table(headers, rows)


def verbs_table(figures: dict[str, Any]) -> str:
    calls = figures["calls_by_verb"]
    verbs = [v for v in VERBS if v in calls] + [v for v in calls if v not in VERBS]
    return table(
        ["verb", "calls/turn", "commit"],
        [[v, _f(calls[v]), "yes" if v in WRITES else "no"] for v in verbs],
    )


def renew_table(renews: dict[str, dict[str, float]]) -> str:
    rows = [
        [
            name,
            str(int(r["batch"])),
            _f(r["leases_per_s"], 0),
            _f(r["client_cpu_us_per_lease"], 0),
            _f(r["db_cpu_us_per_call"], 0),
            _f(r["db_cpu_us_per_lease"], 1),
            _f(r["shared_cpu_us_per_lease"], 1),
            _f(r["wal_bytes_per_call"], 0),
            _f(r["wal_bytes_per_lease"], 0),
        ]
        for name, r in renews.items()
    ]
    headers = [
        "mode",
        "leases/call",
        "leases/s",
        "client CPU µs/lease",
        "DB CPU µs/call",
        "DB CPU µs/lease",
        "WAL writer etc. µs/lease (server-wide)",
        "WAL B/call",
        "WAL B/lease",
    ]
    return table(headers, rows)


def estimate_table(found: dict[str, Any]) -> str:
    rows = []
    for cores, e in found.items():
        rows.append(
            [
                f"{cores} vCPUs",
                _f(e["turns_per_s"], 0),
                _f(e["commits_per_s"], 0),
                _f(e["wal_mb_per_s"], 1),
                _f(e.get("running_turns_renew", float("nan")), 0),
                _f(e.get("running_turns_batched", float("nan")), 0),
            ]
        )
    batch = next((e["batch"] for e in found.values() if "batch" in e), None)
    headers = [
        "primary",
        f"turns/s at {UTILIZATION:.0%} CPU",
        "commits/s then",
        "WAL MB/s then",
        f"running turns, renew each every {RENEW_EVERY:g} s",
        f"running turns, renew_many of {batch} every {RENEW_EVERY:g} s"
        if batch
        else "running turns, renew_many",
    ]
    return table(headers, rows)


def arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small sizes: seconds")
    parser.add_argument("--json", action="store_true", help="one JSON line of figures at the end")
    parser.add_argument("--rounds", type=int, default=7, help="counted rounds of turns")
    parser.add_argument("--warm", type=int, default=1, help="uncounted rounds first")
    parser.add_argument("--sessions", type=int, default=64, help="sessions a round")
    parser.add_argument("--sends", type=int, default=6, help="sends a session a round")
    parser.add_argument("--pause", type=float, default=0.05, help="most seconds between sends")
    parser.add_argument("--leases", type=int, default=1000, help="leases held and renewed")
    parser.add_argument("--passes", type=int, default=5, help="renewal passes per mode")
    parser.add_argument("--batches", type=int, nargs="+", default=[10, 100, 500])
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.warm, args.sessions, args.sends = 2, 1, 8, 3
        args.leases, args.passes, args.batches = 40, 2, [10, 40]
    if min(args.rounds, args.sessions, args.sends, args.leases, args.passes) < 1:
        parser.error("--rounds, --sessions, --sends, --leases and --passes are at least 1")
    if args.warm < 0 or args.pause < 0 or min(args.batches) < 2:
        parser.error("--warm and --pause are at least 0, --batches at least 2")
    return args


async def main(argv: Sequence[str] | None = None) -> None:
    args = arguments(argv)
    load_before = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    try:
        found = await run(args)
    except Unavailable as exc:
        print(f"# What one Postgres primary spends\n\n- skipped: {exc}")
        if args.json:
            print(json.dumps({"skipped": str(exc)}))
        return
    load_after = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    turns = turn_figures(found["rounds"])
    renews = renew_figures(found["modes"])
    guess = estimate(turns, renews)
    settings = ", ".join(f"{k} {v}" for k, v in found["settings"].items())
    print("# What one Postgres primary spends per turn and per renewal\n")
    lines = [
        f"- load average before {load_before}, after {load_after}",
        f"- {found['server']} on this machine, loopback; {settings}; asyncpg {version('asyncpg')}",
        f"- turns: one replica, concurrency {CONCURRENCY}, the demo agent (one tool call of 0 s);"
        f" {args.rounds} rounds of {args.sessions} sessions x {args.sends} sends (~1 KB each,"
        f" up to {args.pause:g} s apart) after {args.warm} warm-up; end states"
        f" {found['states']}",
        f"- renewals: {args.leases} leases held, {args.passes} passes per mode after one"
        " warm-up pass each",
        "- DB CPU: the backends serving this run's database only (autovacuum not in it);"
        " the WAL writer, checkpointer and background writer apart, server-wide; the WAL"
        " is server-wide too (other tenants' writes add to it: medians over rounds)",
    ]
    print(machine(lines))
    print("\n## Turns (per round; the median row is each column's median)\n")
    print(turns_table(found["rounds"], turns))
    print("\n## Store calls per turn, by verb (all counted rounds; the front door's enqueue too)\n")
    print(verbs_table(turns))
    print("\n## Renewals (medians over passes)\n")
    print(renew_table(renews))
    print(
        f"\n## A primary's share, on paper ({UTILIZATION:.0%} of its vCPUs, each a core here;"
        " the backends' CPU only)\n"
    )
    print(estimate_table(guess))
    for note in found["notes"]:
        print(f"\n- {note}")
    print(f"\n({time.perf_counter() - STARTED:.0f} s)")
    if args.json:
        print(
            json.dumps(
                {
                    "args": {
                        k: getattr(args, k)
                        for k in ("rounds", "warm", "sessions", "sends", "pause", "leases")
                    }
                    | {"passes": args.passes, "batches": args.batches},
                    "server": found["server"],
                    "settings": found["settings"],
                    "states": found["states"],
                    "turns": turns,
                    "renewals": renews,
                    "estimate": guess,
                    "notes": found["notes"],
                    "seconds": round(time.perf_counter() - STARTED, 1),
                }
            )
        )


if __name__ == "__main__":
    asyncio.run(main())
