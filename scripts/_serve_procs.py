"""The processes and databases the bounds scripts measure (``bounds_load.py``,
``stop_latency.py``, ``soak.py``): real ``steerable serve`` processes over a scratch database.

- :func:`scratch_store` makes a database of its own for one run and yields its store URL:
  a SQLite file in the run's temporary directory, a new Postgres or MariaDB database
  (created, migrated, dropped after), or a SecantusDB server started for the run (MongoDB's
  wire protocol, as ``tests/stores/mongodb/_server.py`` starts it; the server is ended and
  its files go with the directory). The servers are found as the tests find them:
  ``STEERABLE_PG_DSN`` and ``STEERABLE_MYSQL_HOST`` (``_PORT``, ``_USER``, ``_PASSWORD``).
- :class:`Serve` is one ``steerable serve`` process (its port picked by the OS, read from
  uvicorn's start line), serving :data:`AGENT`: the keyless demo agent of
  ``examples/agents/two_tools.py``, whose two tool calls a turn take ``tool_seconds`` each
  (hours: a turn that never ends within the run). :meth:`Serve.memory` reads the process's
  resident memory from ``/proc``; :func:`db_ports` the local ports of its connections to
  the database.

Every process started here is ended by its own pid (SIGTERM, then SIGKILL) when its block
ends. Progress goes to stderr (:func:`note`); a script's figures are one JSON line on
stdout (:func:`emit`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run as a script from a checkout

STORES = ("sqlite", "postgres", "mysql", "mongodb")
AGENT = "examples.agents.two_tools:AGENT"
PG_DSN = os.environ.get("STEERABLE_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")

__all__ = [
    "AGENT",
    "PG_DSN",
    "ROOT",
    "STORES",
    "Memory",
    "Scratch",
    "Serve",
    "db_ports",
    "emit",
    "median",
    "note",
    "scratch_store",
    "serving",
    "slope",
]


def note(message: str) -> None:
    """A line of progress, on stderr (stdout holds only the figures)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def emit(figures: dict[str, Any]) -> None:
    """The run's figures: one JSON line on stdout."""
    print(json.dumps(figures, sort_keys=False), flush=True)


def median(values: Sequence[float]) -> float | None:
    """The median of ``values`` (None for none)."""
    ordered = sorted(values)
    if not ordered:
        return None
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def slope(points: Sequence[tuple[float, float]]) -> float | None:
    """The least-squares slope of ``(x, y)`` points (None for fewer than two distinct x)."""
    if len(points) < 2:
        return None
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    if spread == 0:
        return None
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread


# -- databases ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Scratch:
    """A run's database: its store URL, its kind, and the TCP port of its server (None
    for SQLite)."""

    url: str
    kind: str
    port: int | None
    name: str


@contextlib.asynccontextmanager
async def scratch_store(kind: str, directory: Path) -> AsyncIterator[Scratch]:
    """A fresh, migrated database of ``kind`` (one of :data:`STORES`) for one run."""
    name = f"steerable_bounds_{secrets.token_hex(4)}"
    if kind == "sqlite":
        yield Scratch(f"sqlite:///{directory / (name + '.db')}", kind, None, name)
    elif kind == "postgres":
        async with _postgres(name) as scratch:
            yield scratch
    elif kind == "mysql":
        async with _mysql(name) as scratch:
            yield scratch
    elif kind == "mongodb":
        async with _mongodb(name, directory) as scratch:
            yield scratch
    else:
        raise ValueError(f"unknown store {kind!r}; the stores are {', '.join(STORES)}")


async def _migrate(url: str) -> None:
    from steerable.stores.url import migrate_url

    await migrate_url(url)


@contextlib.asynccontextmanager
async def _postgres(name: str) -> AsyncIterator[Scratch]:
    import asyncpg  # type: ignore[import-untyped]

    admin = await asyncpg.connect(PG_DSN, timeout=10)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    parts = urlsplit(PG_DSN)
    url = urlunsplit(("postgresql", parts.netloc, "/" + name, "", ""))
    try:
        await _migrate(url)
        yield Scratch(url, "postgres", parts.port or 5432, name)
    finally:
        admin = await asyncpg.connect(PG_DSN, timeout=10)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


@contextlib.asynccontextmanager
async def _mysql(name: str) -> AsyncIterator[Scratch]:
    import aiomysql  # type: ignore[import-untyped]

    env = os.environ.get
    host, port = env("STEERABLE_MYSQL_HOST", "127.0.0.1"), int(env("STEERABLE_MYSQL_PORT", "3306"))
    user, password = env("STEERABLE_MYSQL_USER", "root"), env("STEERABLE_MYSQL_PASSWORD", "")

    async def admin(sql: str) -> None:
        conn = await aiomysql.connect(
            host=host, port=port, user=user, password=password, autocommit=True
        )
        try:
            async with conn.cursor() as cur:
                await cur.execute(sql)
        finally:
            conn.close()

    await admin(f"CREATE DATABASE {name} CHARACTER SET utf8mb4")
    auth = quote(user) + (":" + quote(password) if password else "")
    url = f"mysql://{auth}@{host}:{port}/{name}"
    try:
        await _migrate(url)
        yield Scratch(url, "mysql", port, name)
    finally:
        await admin(f"DROP DATABASE IF EXISTS {name}")


def free_port() -> int:
    """A TCP port nobody listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.asynccontextmanager
async def _mongodb(name: str, directory: Path) -> AsyncIterator[Scratch]:
    """A SecantusDB server of the run's own (a separate program: it is GPL, never imported)."""
    from pymongo import AsyncMongoClient
    from pymongo.errors import PyMongoError

    port, data = free_port(), directory / "secantus"
    data.mkdir(exist_ok=True)
    config = directory / "secantusd.toml"
    config.touch()  # an empty config: no secantusd.toml found elsewhere applies
    command = [sys.executable, "-m", "secantus", "--config", str(config), "--host", "127.0.0.1"]
    command += ["--port", str(port), "--storage-path", str(data), "--log-level", "WARNING"]
    process = _spawn(command, directory / "secantus.log", directory)
    address = f"mongodb://127.0.0.1:{port}/?directConnection=true"
    try:
        client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
            address, serverSelectionTimeoutMS=250
        )
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    await client.admin.command("ping")
                    break
                except PyMongoError:
                    if process.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError("SecantusDB did not start") from None
                    await asyncio.sleep(0.1)
        finally:
            await client.close()
        url = f"mongodb://127.0.0.1:{port}/{name}?directConnection=true"
        await _migrate(url)
        yield Scratch(url, "mongodb", port, name)
    finally:
        _end(process)


# -- serve processes ----------------------------------------------------------------------


@dataclass(frozen=True)
class Memory:
    """A process's resident memory now (``VmRSS``) and at its peak so far (``VmHWM``), MB."""

    rss_mb: float
    peak_mb: float


class Serve:
    """One ``steerable serve`` process over ``store``; its output goes to ``log``."""

    def __init__(
        self,
        store: str,
        *flags: str,
        log: Path,
        tool_seconds: float = 3600.0,
        replica: str = "bounds",
    ) -> None:
        self.log = log
        self.command = [sys.executable, "-m", "steerable.cli", "serve", "--store", store]
        self.command += ["--port", "0", "--agent", AGENT, "--replica-id", replica, *flags]
        self.env = {**os.environ, "STEERABLE_TOOL_SECONDS": str(tool_seconds)}
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0

    @property
    def url(self) -> str:
        """The base URL it answers on."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        """Its process id."""
        assert self.process is not None
        return self.process.pid

    async def start(self, within: float = 60.0) -> Serve:
        """Start it and wait (``within`` seconds at most) until uvicorn says where it listens."""
        self.process = _spawn(self.command, self.log, ROOT, self.env)
        deadline = time.monotonic() + within
        while True:
            found = re.search(r"Uvicorn running on http://[^:]+:(\d+)", self.text())
            if found:
                self.port = int(found.group(1))
                return self
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"steerable serve did not start:\n{self.text()[-2000:]}")
            await asyncio.sleep(0.05)

    def text(self) -> str:
        """What it logged so far."""
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def memory(self) -> Memory:
        """Its ``VmRSS`` and ``VmHWM`` now, from ``/proc/PID/status``."""
        fields: dict[str, float] = {}
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0]) / 1024  # kB
        return Memory(round(fields["VmRSS"], 1), round(fields["VmHWM"], 1))

    def stop(self) -> None:
        """End it (SIGTERM: a clean shutdown, SIGKILL if it lingers)."""
        if self.process is not None:
            _end(self.process)


def _spawn(
    command: list[str], log: Path, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``command`` (a fork and an exec: quick), its output appended to ``log``."""
    with log.open("ab") as out:
        return subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)


def _end(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextlib.asynccontextmanager
async def serving(
    scratch: Scratch,
    directory: Path,
    *flags: str,
    tag: str = "serve",
    tool_seconds: float = 3600.0,
) -> AsyncIterator[Serve]:
    """A ``steerable serve`` over ``scratch``, ready (``/readyz`` answers 200), ended after."""
    import httpx

    server = Serve(
        scratch.url,
        *flags,
        log=directory / f"{tag}.log",
        tool_seconds=tool_seconds,
        replica=tag,
    )
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=5) as http:
            for _ in range(200):
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get("/readyz")).status_code == 200:
                        break
                await asyncio.sleep(0.05)
        yield server
    finally:
        server.stop()


def db_ports(pid: int, server_port: int) -> list[int]:
    """The local ports of process ``pid``'s established TCP connections to ``server_port``
    (its database connections), from its file descriptors and ``/proc/net/tcp{,6}``."""
    inodes: set[str] = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    ports: list[int] = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                cells = line.split()
                local, remote, state, inode = cells[1], cells[2], cells[3], cells[9]
                if (
                    inode in inodes
                    and state == "01"
                    and int(remote.rsplit(":", 1)[1], 16) == server_port
                ):
                    ports.append(int(local.rsplit(":", 1)[1], 16))
    return sorted(ports)
