"""What a Postgres server on this machine spends for one database: its backends' CPU, its WAL.

:class:`Backends` reads the CPU time (user + system) of the server processes serving one
database, found by their process title (``postgres: 15/main: <user> <database> <client>
<state>``), each named by a role the caller gives its connections' backend pids
(``pg_backend_pid()``). The time is the first field of ``/proc/<pid>/schedstat`` (the
scheduler's run time, in ns), or where that file is missing ``utime + stime`` of
``/proc/<pid>/stat`` (fields 14 and 15, in clock ticks, 100 a second on Linux: coarse for a
short measurement over many backends). Only the backends of that database count in ``"all"``:
the WAL writer, the checkpointer and the background writer work for every database at once
(their titles name none); their CPU is read too, as ``"shared"``, and is the whole server's.
Autovacuum workers come and go unseen and are in no figure. A backend that exits between two
readings takes its last CPU with it, so the connections must stay open across a measurement
(pools keep theirs; :attr:`Backends.changed` says if one came or went). This works only where
the server runs on this machine (Linux ``/proc``); elsewhere the figures are ``nan``.

:func:`wal_lsn` is the server's WAL position: the bytes between two readings are every
database's writes, the other tenants' too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def titles() -> dict[int, str]:
    """Every Postgres server process's title (its ``cmdline``), by pid."""
    found: dict[int, str] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as handle:
                title = handle.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if title.startswith("postgres: "):
            found[int(name)] = title
    return found


def serving(database: str) -> list[int]:
    """The pids of the backends whose title names ``database`` (as a word of its own)."""
    return [pid for pid, title in titles().items() if database in title.split()]


SHARED = ("walwriter", "checkpointer", "background writer")


def shared() -> list[int]:
    """The pids of the WAL writer, the checkpointer and the background writer."""
    return [pid for pid, title in titles().items() if title.endswith(SHARED)]


def cpu(pid: int) -> float | None:
    """The CPU seconds (user + system) ``pid`` has run, None if it is gone."""
    try:
        with open(f"/proc/{pid}/schedstat", "rb") as handle:
            return int(handle.read().split()[0]) / 1e9
    except (OSError, IndexError, ValueError):
        pass
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read().decode(errors="replace")
    except OSError:
        return None
    # after "pid (comm) ", field 3 (state) is the first: utime is field 14, stime 15
    rest = stat[stat.rindex(")") + 2 :].split()
    return (int(rest[11]) + int(rest[12])) / TICK


@dataclass
class Backends:
    """The backends of one database, each with a role; their CPU seconds by role."""

    database: str
    roles: dict[int, str] = field(default_factory=dict)  # pid -> role; others are "other"
    changed: list[str] = field(default_factory=list)  # backends that came or went
    shared: list[int] = field(default_factory=shared)

    def find(self) -> list[int]:
        """Look for the database's backends now; a new one is noted in :attr:`changed`."""
        pids = serving(self.database)
        for pid in pids:
            if pid not in self.roles:
                if self.roles:
                    self.changed.append(f"backend {pid} came")
                self.roles[pid] = "other"
        return pids

    def seconds(self) -> dict[str, float]:
        """CPU seconds so far of the known backends, summed by role, ``"all"`` of them, and
        ``"shared"`` (the WAL writer, checkpointer and background writer: every database's)."""
        if not self.find():
            return {"all": float("nan"), "shared": float("nan")}
        found: dict[str, float] = {"all": 0.0, "shared": 0.0}
        for pid, role in sorted(self.roles.items()):
            seconds = cpu(pid)
            if seconds is None:
                note = f"backend {pid} ({role}) went"
                if note not in self.changed:
                    self.changed.append(note)
                continue
            found[role] = found.get(role, 0.0) + seconds
            found["all"] += seconds
        found["shared"] = sum(cpu(pid) or 0.0 for pid in self.shared)
        return found


def spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds by role between two :meth:`Backends.seconds` readings."""
    return {role: after[role] - before.get(role, 0.0) for role in after}


async def pids(pool: Any, size: int) -> list[int]:
    """The backend pids of all ``size`` connections of an asyncpg ``pool``, held at once."""
    connections = [await pool.acquire() for _ in range(size)]
    try:
        return [int(await c.fetchval("SELECT pg_backend_pid()")) for c in connections]
    finally:
        for connection in connections:
            await pool.release(connection)


def lsn(text: str) -> int:
    """A ``pg_lsn`` such as ``0/1A2B3C4`` as a byte position."""
    high, low = text.split("/")
    return (int(high, 16) << 32) + int(low, 16)


async def wal_lsn(connection: Any) -> int:
    """The server's current WAL write position, in bytes."""
    return lsn(str(await connection.fetchval("SELECT pg_current_wal_lsn()::text")))
