"""Chaos for the service: replicas killed and paused under load, then every promise checked.

    python scripts/chaos.py --store sqlite|postgres|mysql [--sessions N] [--inputs N]
        [--kills N] [--pauses N] [--restart-db] [--seed N] [--lease S] ...

Three replica processes (``scripts/service_replica.py``, the keyless demo agent) serve one fresh
database. Client processes of their own (``Service(store)`` without an agent) and the
replicas' command lines (their stdin) send and steer into many sessions, some ids twice
(a retry from the same process, or the same input through another process or replica).
Meanwhile replicas are killed (SIGKILL, then started again) and paused past their lease
(SIGSTOP, then SIGCONT), and with ``--restart-db`` the database server is restarted once.
Then the sessions drain (every one idle with nothing waiting), and the store alone is read
back to check that every input was answered exactly once and in order, that no turn was
recorded twice and that every transcript is valid (see :func:`_check_session`).

It prints one JSON summary and exits 1 when any check failed (``violations`` > 0), 2 when
the run itself could not be made. The servers are found as the tests find them:
``STEERABLE_PG_DSN`` and ``STEERABLE_MYSQL_HOST`` (``_PORT``, ``_USER``, ``_PASSWORD``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import secrets
import signal
import sys
import tempfile
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script from a checkout

from chaos_check import Findings, verify  # noqa: E402  (beside this script)

from steerable.errors import SteerableError  # noqa: E402
from steerable.service import Service  # noqa: E402
from steerable.stores.url import migrate_url, open_url  # noqa: E402

REPLICA = ROOT / "scripts" / "service_replica.py"
REPLICAS = 3
RETRY_FOR = 120.0  # seconds a client keeps retrying one input (a database restart included)


# -- options ------------------------------------------------------------------------------


def _arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--store", choices=("sqlite", "postgres", "mysql"), default="sqlite")
    add("--sessions", type=int, default=12, help="sessions written to")
    add("--inputs", type=int, default=300, help="inputs (sends and steers), duplicates aside")
    add("--kills", type=int, default=3, help="replicas SIGKILLed (and started again)")
    add("--pauses", type=int, default=3, help="replicas SIGSTOPped past their lease")
    add("--restart-db", action="store_true", help="restart the database server once")
    add("--seed", type=int, default=1)
    add("--lease", type=float, default=1.0, help="the replicas' lease seconds")
    add("--rate", type=float, default=20.0, help="inputs per second, all sessions together")
    add("--workers", type=int, default=3, help="client processes")
    add("--tool-seconds", type=float, default=0.4, help="the demo tool's seconds")
    add("--calls", type=int, default=2, help="the demo's tool calls per turn")
    add("--drain", type=float, default=120.0, help="seconds allowed to drain")
    add("--logs", default=None, help="keep the replicas' logs in DIR")
    add("--keep", action="store_true", help="keep the database (to look at it after)")
    add("--client", nargs=3, metavar=("URL", "PLAN", "ACKS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.client is None and (args.sessions < 1 or args.inputs < 1 or args.workers < 1):
        parser.error("--sessions, --inputs and --workers are at least 1")
    return args


# -- the database -------------------------------------------------------------------------


@dataclass
class Database:
    """A fresh database for one run: its URL, how to drop it, how to restart its server."""

    url: str
    drop: Callable[[], Awaitable[None]]
    restart: list[list[str]] = field(default_factory=list)


async def _database(kind: str, scratch: Path) -> Database:
    name = f"steerable_chaos_{secrets.token_hex(5)}"
    if kind == "sqlite":
        return Database(f"sqlite:///{scratch / 'chaos.db'}", lambda: asyncio.sleep(0))
    if kind == "postgres":
        return await _postgres(name)
    return await _mysql(name)


# How --restart-db restarts the server: STEERABLE_CHAOS_RESTART (a shell command) if set,
# else the local Debian-packaged server's own tools (the first cluster, fast shutdown)
PG_RESTART = (
    "pg_ctlcluster --skip-systemctl-redirect -m fast"
    " $(pg_lsclusters --no-header | awk 'NR == 1 {print $1, $2}') restart"
)
MARIADB_RESTART = (
    "start-stop-daemon --stop --oknodo --retry 30 --exec $(command -v mariadbd) &&"
    " start-stop-daemon --start --oknodo --background --exec $(command -v mariadbd)"
)


def _restart(default: str) -> list[list[str]]:
    return [["sh", "-c", os.environ.get("STEERABLE_CHAOS_RESTART", default)]]


async def _postgres(name: str) -> Database:
    import asyncpg  # type: ignore[import-untyped]

    dsn = os.environ.get("STEERABLE_PG_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
    admin = await asyncpg.connect(dsn, timeout=10)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    parts = urlsplit(dsn)
    url = urlunsplit(("postgresql", parts.netloc, "/" + name, "pool=4", ""))
    await migrate_url(url)

    async def drop() -> None:
        admin = await asyncpg.connect(dsn, timeout=10)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()

    return Database(url, drop, _restart(PG_RESTART))


async def _mysql(name: str) -> Database:
    import aiomysql  # type: ignore[import-untyped]

    env = os.environ.get
    host, port = env("STEERABLE_MYSQL_HOST", "127.0.0.1"), int(env("STEERABLE_MYSQL_PORT", "3306"))
    user, password = env("STEERABLE_MYSQL_USER", "root"), env("STEERABLE_MYSQL_PASSWORD", "")
    login = {"host": host, "port": port, "user": user, "password": password}

    async def admin(sql: str) -> None:
        conn = await aiomysql.connect(**login, autocommit=True)
        try:
            async with conn.cursor() as cur:
                await cur.execute(sql)
        finally:
            conn.close()

    await admin(f"CREATE DATABASE {name} CHARACTER SET utf8mb4")
    auth = quote(user) + (":" + quote(password) if password else "")
    url = f"mysql://{auth}@{host}:{port}/{name}?pool=4"
    await migrate_url(url)
    return Database(
        url, lambda: admin(f"DROP DATABASE IF EXISTS {name}"), _restart(MARIADB_RESTART)
    )


# -- the plan -----------------------------------------------------------------------------


@dataclass
class Op:
    """One send or steer of the plan: when, where, and by which route (a worker or replica)."""

    at: float
    session: str
    kind: str
    id: str
    text: str
    route: str  # "w<N>" (a client process) or "r" (a replica's stdin)
    through: int = -1  # the replica a first send goes through, and its duplicate does not
    duplicate: bool = False


def _plan(args: argparse.Namespace, rng: random.Random) -> list[Op]:
    span = args.inputs / args.rate
    routes = [f"w{n}" for n in range(args.workers)] + ["r"]
    ops: list[Op] = []
    for n in range(args.inputs):
        kind = "steer" if rng.random() < 0.45 else "send"
        id = f"i{n:05d}"
        route = rng.choice(routes) if rng.random() < 0.4 else routes[n % args.workers]
        op = Op(rng.uniform(0, span), f"s{rng.randrange(args.sessions):03d}", kind, id, "", route)
        op.text = f"{kind} {id}"
        if route == "r":
            op.through = rng.randrange(REPLICAS)
        ops.append(op)
        roll = rng.random()
        if roll < 0.08:  # the same input again through another route, soon or at once
            other = rng.choice([r for r in routes if r != route] or routes)
            later = op.at + rng.choice((0.0, rng.uniform(0, 0.6)))
            ops.append(Op(later, op.session, kind, id, op.text, other, op.through, True))
        elif roll < 0.12:  # a retry of the same id from the same route
            later = op.at + rng.uniform(0.01, 0.3)
            ops.append(Op(later, op.session, kind, id, op.text, route, op.through, True))
    ops.sort(key=lambda o: o.at)
    return ops


# -- a client process ---------------------------------------------------------------------


async def _send_retrying(
    send: Callable[[], Awaitable[dict[str, Any] | None]], op: Op
) -> dict[str, Any]:
    """Send ``op`` until it is answered (the same id each time) or ``RETRY_FOR`` has passed."""
    deadline, tries, error = time.monotonic() + RETRY_FOR, 0, ""
    while time.monotonic() < deadline:
        tries += 1
        try:
            answer = await send()
        except (SteerableError, OSError) as exc:
            answer, error = None, f"{type(exc).__name__}: {exc}"
        if answer is not None:
            return {"op": op.id, "session": op.session, "route": op.route, "tries": tries} | answer
        await asyncio.sleep(0.2)
    return {"op": op.id, "session": op.session, "route": op.route, "failed": error}


async def _client(url: str, plan: str, acks: str) -> None:
    """A client process: sends its part of the plan through ``Service(store)``, no agent."""
    document = json.loads(Path(plan).read_text())  # noqa: ASYNC240 (once, at the start)
    base, ops = document["start"], [Op(**o) for o in document["ops"]]
    async with open_url(url) as store:
        service = Service(store)
        with open(acks, "a", encoding="utf-8") as out:  # noqa: ASYNC230 (small appends)

            async def one(op: Op) -> None:
                await asyncio.sleep(max(0.0, base + op.at - time.time()))
                verb = service.send if op.kind == "send" else service.steer

                async def send() -> dict[str, Any]:
                    got = await verb(op.session, op.text, id=op.id)
                    return {"id": got.id, "kind": got.kind, "seq": got.seq, "turn": got.turn,
                            "duplicate": got.duplicate}  # fmt: skip

                out.write(json.dumps(await _send_retrying(send, op)) + "\n")
                out.flush()

            await asyncio.gather(*(one(op) for op in ops))


# -- the replicas -------------------------------------------------------------------------


class ReplicaProcess:
    """One incarnation of a replica: its process, its command line and its last counters."""

    def __init__(self, slot: int, incarnation: int, url: str, args: argparse.Namespace) -> None:
        self.slot, self.name = slot, f"r{slot}.{incarnation}"
        self.url, self.args = url, args
        self.proc: asyncio.subprocess.Process | None = None
        self.ready = False
        self.paused = False
        self.counters: dict[str, Any] = {}
        self._pending: deque[asyncio.Future[dict[str, Any]]] = deque()
        self._reader: asyncio.Task[None] | None = None

    async def start(self, logs: Path) -> None:
        """Start the process and wait for its ready line."""
        a = self.args
        command = [sys.executable, str(REPLICA), "--store", self.url, "--replica", self.name]
        command += ["--lease", str(a.lease), "--poll", "0.1", "--seconds", str(a.tool_seconds)]
        command += ["--calls", str(a.calls), "--model-delay", "0.02"]
        # this checkout's steerable, whichever one the interpreter has installed
        path = os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))
        with open(logs / f"{self.name}.log", "ab") as log:  # noqa: ASYNC230
            self.proc = await asyncio.create_subprocess_exec(
                *command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=log, cwd=ROOT, env=os.environ | {"PYTHONPATH": path},
            )  # fmt: skip
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), 60)
        if not line or not json.loads(line).get("ready"):
            raise RuntimeError(f"replica {self.name} did not start: {line!r}")
        self._reader = asyncio.create_task(self._read())
        self.ready = True

    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            if self._pending:
                future = self._pending.popleft()
                if not future.done():
                    future.set_result(json.loads(line))
        self.ready = False
        while self._pending:  # it died: no answer is coming
            future = self._pending.popleft()
            if not future.done():
                future.set_result({"ok": False, "error": "the process is gone"})

    async def command(self, command: dict[str, Any], wait: float = 5.0) -> dict[str, Any]:
        """Send one command line; its answer, or an exception (gone, timed out, refused)."""
        if not self.ready or self.proc is None or self.proc.stdin is None:
            raise ConnectionError(f"replica {self.name} is not serving")
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending.append(future)
        self.proc.stdin.write(json.dumps(command).encode() + b"\n")
        await self.proc.stdin.drain()
        answer = await asyncio.wait_for(asyncio.shield(future), wait)
        if not answer.get("ok"):
            raise ConnectionError(f"replica {self.name}: {answer.get('error')}")
        result: dict[str, Any] = answer["result"] or {}
        return result

    def signal(self, number: int) -> None:
        """Send ``number`` to the process (if it still runs)."""
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(number)

    async def kill(self) -> None:
        """SIGKILL, and wait until it is gone."""
        self.ready = False
        self.signal(signal.SIGKILL)
        if self.proc is not None:
            await self.proc.wait()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)

    async def close(self) -> None:
        """End the process the gentle way (stdin closed), or kill it after 15 s."""
        self.signal(signal.SIGCONT)
        if self.proc is None:
            return
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), 15)
        except TimeoutError:
            await self.kill()
        self.ready = False


# -- the run ------------------------------------------------------------------------------


@dataclass
class Tally:
    """What the chaos did."""

    kills: int = 0
    pauses: int = 0
    db_restarts: int = 0
    skipped: int = 0
    incarnations: list[ReplicaProcess] = field(default_factory=list)


class Run:
    """The replicas, the client processes and the chaos of one run."""

    def __init__(self, args: argparse.Namespace, db: Database, logs: Path) -> None:
        self.args, self.db, self.logs = args, db, logs
        self.rng = random.Random(args.seed * 7919 + 1)
        self.replicas: list[ReplicaProcess] = []
        self.tally = Tally()
        self.acks: list[dict[str, Any]] = []
        self.base = 0.0  # the wall-clock start of the plan (set once the replicas serve)
        self._starting: set[asyncio.Task[None]] = set()
        self.client_procs: list[asyncio.subprocess.Process] = []
        self.broken: str | None = None  # why a killed replica could not be started again

    async def _spawn(self, slot: int) -> ReplicaProcess:
        replica = ReplicaProcess(slot, len(self.tally.incarnations), self.db.url, self.args)
        self.tally.incarnations.append(replica)
        await replica.start(self.logs)
        return replica

    async def start(self) -> None:
        """Start the three replicas."""
        self.replicas = list(await asyncio.gather(*(self._spawn(s) for s in range(REPLICAS))))

    def serving(self, but: int = -1) -> list[ReplicaProcess]:
        """The replicas that answer commands now (not slot ``but``, unless it alone does)."""
        ready = [r for r in self.replicas if r.ready and not r.paused]
        return [r for r in ready if r.slot != but] or ready

    async def via_replica(self, op: Op) -> None:
        """Send ``op`` through a replica's stdin, another one on each failure."""
        await asyncio.sleep(max(0.0, self.base + op.at - time.time()))

        async def send() -> dict[str, Any] | None:
            choices = self.serving(op.through if op.duplicate else -1)
            if not op.duplicate:
                choices = [r for r in choices if r.slot == op.through] or choices
            if not choices:
                return None
            replica = self.rng.choice(choices)
            command = {"op": op.kind, "session": op.session, "text": op.text, "id": op.id}
            try:
                got = await replica.command(command)
            except (ConnectionError, TimeoutError, OSError):
                return None
            keys = ("id", "kind", "seq", "turn", "duplicate")
            return {k: got[k] for k in keys} | {"replica": replica.name}

        self.acks.append(await _send_retrying(send, op))

    async def clients(self, ops: list[Op]) -> None:
        """Start the client processes and the replica route; wait until all have sent."""
        procs, files = self.client_procs, []
        for n in range(self.args.workers):
            mine = [o for o in ops if o.route == f"w{n}"]
            plan = self.logs / f"plan-w{n}.json"
            plan.write_text(json.dumps({"start": self.base, "ops": [vars(o) for o in mine]}))
            files.append(self.logs / f"acks-w{n}.jsonl")
            argv = ["--client", self.db.url, str(plan), str(files[-1])]
            with open(self.logs / f"w{n}.log", "ab") as log:  # noqa: ASYNC230 (the drivers' logs)
                client = await asyncio.create_subprocess_exec(
                    sys.executable, __file__, *argv, stderr=log
                )
            procs.append(client)
        await asyncio.gather(*(self.via_replica(o) for o in ops if o.route == "r"))
        codes = await asyncio.gather(*(p.wait() for p in procs))
        if any(codes):
            raise RuntimeError(f"a client process failed: exit codes {codes}")
        for path in files:
            self.acks += [json.loads(line) for line in path.read_text().splitlines()]

    async def chaos(self, span: float) -> None:
        """Kills, pauses and the database restart, spread over ``span`` seconds."""
        a, rng = self.args, self.rng
        actions = ["kill"] * a.kills + ["pause"] * a.pauses + ["db"] * a.restart_db
        times = sorted(rng.uniform(0.05 * span, 0.9 * span) for _ in actions)
        rng.shuffle(actions)
        if a.restart_db:  # once, in the middle, so that load runs before and after it
            actions.remove("db")
            times.remove(min(times, key=lambda t: abs(t - span / 2)))
            await asyncio.gather(self._chaos(actions, times), self._restart_db(span / 2))
        else:
            await self._chaos(actions, times)

    async def _chaos(self, actions: list[str], times: list[float]) -> None:
        pauses: list[asyncio.Task[None]] = []
        for at, action in zip(times, actions, strict=True):
            if self.broken is not None:  # a run with fewer replicas tests less: stop it
                raise RuntimeError(self.broken)
            await asyncio.sleep(max(0.0, self.base + at - time.time()))
            for _ in range(100):  # one replica keeps serving: wait for a restart or a SIGCONT
                if len(targets := self.serving()) >= 2:
                    break
                await asyncio.sleep(0.1)
            else:
                self.tally.skipped += 1
                continue
            # a replica that runs turns now, if one does: killing an idle one tests little
            busy = [r for r in targets if r.counters.get("running")]
            target = self.rng.choice(busy or targets)
            if action == "kill":
                await self._kill(target)
            else:
                pauses.append(asyncio.create_task(self._pause(target)))
        await asyncio.gather(*pauses, *self._starting)
        if self.broken is not None:
            raise RuntimeError(self.broken)

    def _note(self, action: str, replica: str) -> None:
        """What the chaos did and when, in the run's log folder (to read beside the logs)."""
        line = {"at": round(time.time() - self.base, 2), "action": action, "replica": replica}
        with open(self.logs / "chaos.jsonl", "a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")

    async def _kill(self, replica: ReplicaProcess) -> None:
        self._note("kill", replica.name)
        await replica.kill()
        self.tally.kills += 1

        async def again() -> None:
            try:
                self.replicas[replica.slot] = await self._spawn(replica.slot)
            except (RuntimeError, OSError, TimeoutError) as exc:
                self.broken = f"a killed replica did not start again: {exc!r}"

        task = asyncio.create_task(again())
        self._starting.add(task)
        task.add_done_callback(self._starting.discard)

    async def _pause(self, replica: ReplicaProcess) -> None:
        replica.paused = True
        self._note("pause", replica.name)
        replica.signal(signal.SIGSTOP)
        self.tally.pauses += 1
        await asyncio.sleep(self.args.lease * self.rng.uniform(1.5, 2.5))
        replica.signal(signal.SIGCONT)
        self._note("resume", replica.name)
        replica.paused = False

    async def _restart_db(self, at: float) -> None:
        await asyncio.sleep(max(0.0, self.base + at - time.time()))
        self._note("restart-db", "")
        for command in self.db.restart:
            proc = await asyncio.create_subprocess_exec(
                *command, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
            )
            _, err = await proc.communicate()
            if proc.returncode:
                raise RuntimeError(f"{' '.join(command)} failed: {err.decode().strip()}")
        self.tally.db_restarts += 1

    async def watch_counters(self) -> None:
        """Keep each serving replica's last counters (a killed one keeps what it last said)."""
        while True:
            for replica in self.serving():
                with contextlib.suppress(ConnectionError, TimeoutError, OSError):
                    replica.counters = await replica.command({"op": "counters"}, wait=2)
            await asyncio.sleep(0.5)

    async def stop(self) -> None:
        """Read the replicas' last counters, then end them."""
        for replica in self.serving():
            with contextlib.suppress(ConnectionError, TimeoutError, OSError):
                replica.counters = await replica.command({"op": "counters"}, wait=5)
        await asyncio.gather(*(r.close() for r in self.replicas))


async def _drain(service: Service, sessions: list[str], seconds: float) -> list[str]:
    """Wait until every session is idle with nothing waiting; the sessions that never were."""
    deadline = time.monotonic() + seconds
    busy = list(sessions)
    while busy and time.monotonic() < deadline:
        now = await asyncio.gather(*(service.status(s) for s in busy), return_exceptions=True)
        busy = [
            s
            for s, status in zip(busy, now, strict=True)
            if isinstance(status, BaseException) or status.turn is not None or status.waiting
        ]
        if busy:
            await asyncio.sleep(0.25)
    return busy


# -- main ---------------------------------------------------------------------------------


def _summary(
    args: argparse.Namespace, run: Run, found: Findings, busy: list[str], seconds: dict[str, float]
) -> dict[str, Any]:
    answered = [a for a in run.acks if "failed" not in a]
    sums: Counter[str] = Counter()
    for replica in run.tally.incarnations:
        sums.update({k: v for k, v in replica.counters.items() if isinstance(v, int)})
    violations = [*(f"{s}: not drained" for s in busy), *found.violations]
    return {
        "store": args.store,
        "seed": args.seed,
        "sessions": args.sessions,
        "inputs_planned": args.inputs,
        "inputs_acknowledged": len({(a["session"], a["id"]) for a in answered}),
        "inputs_unacknowledged": len({a["op"] for a in run.acks} - {a["id"] for a in answered}),
        "inputs_stored": found.counts["inputs_stored"],
        "sends_total": sum(a.get("tries", 0) for a in run.acks),
        "duplicates_sent": len(run.acks) - len({a["op"] for a in run.acks}),
        "duplicate_answers": sum(bool(a.get("duplicate")) for a in answered),
        "turns": found.counts["turns"],
        "turn_states": dict(found.states),
        "steers_taken": found.counts["steers_taken"],
        "steers_freed": found.counts["steers_freed"],
        **{k: getattr(run.tally, k) for k in ("kills", "pauses", "db_restarts")},
        "chaos_skipped": run.tally.skipped,
        "takeovers": found.counts["takeovers"],
        "fenced_writes_refused": sums["fenced"],
        "replica_counters": {k: sums[k] for k in ("claims", "resumed", "ended", "store_errors")},
        "violations": len(violations),
        "violation_samples": violations[:20],
        "seconds": {k: round(v, 1) for k, v in seconds.items()},
    }


async def _run(args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    begun = time.monotonic()
    db = await _database(args.store, scratch)
    logs = Path(args.logs) if args.logs else scratch
    logs.mkdir(parents=True, exist_ok=True)
    run = Run(args, db, logs)
    sessions = [f"s{n:03d}" for n in range(args.sessions)]
    try:
        await run.start()
        ops = _plan(args, random.Random(args.seed))
        watcher = asyncio.create_task(run.watch_counters())
        run.base = time.time() + 1.5  # the client processes start meanwhile
        await asyncio.gather(run.clients(ops), run.chaos(args.inputs / args.rate))
        sent = time.monotonic()
        async with open_url(db.url) as store:
            busy = await _drain(Service(store), sessions, args.drain)
        drained = time.monotonic()
        watcher.cancel()
        await run.stop()
        found = await verify(db.url, sessions, run.acks, strict=not run.tally.db_restarts)
    finally:
        for replica in run.tally.incarnations:
            with contextlib.suppress(ProcessLookupError):
                await replica.kill()
        for client in run.client_procs:
            with contextlib.suppress(ProcessLookupError):
                client.kill()
            await client.wait()
        if not args.keep:
            await db.drop()
    seconds = {"wall": time.monotonic() - begun, "sending": sent - begun}
    seconds |= {"drain": drained - sent, "verify": time.monotonic() - drained}
    return _summary(args, run, found, busy, seconds)


def main(argv: list[str] | None = None) -> int:
    """Run the chaos, print the summary; 1 on any violation, 2 when the run broke."""
    args = _arguments(argv)
    if args.client is not None:
        asyncio.run(_client(*args.client))
        return 0
    with tempfile.TemporaryDirectory(prefix="steerable-chaos-") as scratch:
        try:
            summary = asyncio.run(_run(args, Path(scratch)))
        except (RuntimeError, OSError, SteerableError) as exc:
            print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
            return 2
    print(json.dumps(summary, indent=2))
    return 1 if summary["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
