"""What every benchmark shares: the machine header, tables, medians, payloads, byte counts."""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import random
import socket
import statistics
import struct
from collections.abc import Iterable, Sequence

PEERS = (
    "langgraph",
    "langgraph-checkpoint-sqlite",
    "langgraph-checkpoint-postgres",
    "openai-agents",
    "sqlalchemy",
)


def version(package: str) -> str:
    """The installed version of ``package``, or ``"missing"``."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "missing"


def machine(extra: Iterable[str] = ()) -> str:
    """A header saying where and when the figures were taken."""
    cores = os.cpu_count()
    peers = ", ".join(f"{p} {version(p)}" for p in PEERS)
    lines = [
        f"- date: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC",
        f"- machine: {platform.machine()}, {cores} cores (shared), {platform.system()}"
        f" {platform.release()}",
        f"- Python {platform.python_version()}, steerable {version('steerable')},"
        f" SQLite {__import__('sqlite3').sqlite_version}",
        f"- peers: {peers}",
        *extra,
    ]
    return "\n".join(lines)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A markdown table, columns padded so it also reads well in a terminal."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    rule = "| " + " | ".join("-" * w for w in widths) + " |"
    return "\n".join([line(headers), rule, *(line(r) for r in rows)])


def median(values: Sequence[float]) -> float:
    """The median, NaN for no values."""
    return statistics.median(values) if values else float("nan")


def mean(values: Sequence[float]) -> float:
    """The mean, NaN for no values."""
    return statistics.fmean(values) if values else float("nan")


def micros(seconds: float) -> str:
    """``seconds`` as whole microseconds (or a decimal under 10 µs)."""
    us = seconds * 1e6
    if us != us:
        return "n/a"
    return f"{us:.1f}" if us < 10 else f"{us:,.0f}"


def size(count: float) -> str:
    """A byte count, short: ``812 B``, ``2.1 KB``, ``1.9 MB``."""
    if count != count:
        return "n/a"
    for unit, scale in (("MB", 1e6), ("KB", 1e3)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count:.0f} B"


def ratio(value: float, base: float) -> str:
    """``value / base`` as ``1.23x``."""
    if base <= 0 or value != value or base != base:
        return "n/a"
    r = value / base
    return f"{r:.2f}x" if r < 10 else f"{r:.0f}x"


def written() -> int:
    """Bytes this process has written so far: to files, and over TCP; -1 off Linux.

    Files are counted by ``wchar`` of ``/proc/self/io`` (every ``write()``): for a SQLite
    database that is each page image put in the WAL and each checkpoint into the main file.
    TCP is counted by the kernel's ``bytes_sent`` of every TCP socket the process holds
    open (``TCP_INFO``): for a database server that is everything sent to it, statements
    and parameters. All threads count, so nothing else may write while a call is measured,
    and a connection must stay open across a measurement (pools keep theirs).
    """
    try:
        with open("/proc/self/io", "rb") as io:
            files = next(int(line.split()[1]) for line in io if line.startswith(b"wchar:"))
    except (OSError, StopIteration):
        return -1
    return files + _tcp_sent()


def _tcp_sent() -> int:
    total = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            if not os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                continue
            sock = socket.socket(fileno=int(name))
        except OSError:
            continue
        try:
            if sock.family in (socket.AF_INET, socket.AF_INET6) and sock.type == socket.SOCK_STREAM:
                info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
                # struct tcp_info: tcpi_bytes_sent at 200 (Linux 4.19+), else bytes_acked at 120
                offset = 200 if len(info) >= 208 else 120
                total += struct.unpack_from("=Q", info, offset)[0]
        except OSError:
            pass
        finally:
            sock.detach()
    return total


_WORDS = [
    "steer",
    "tool",
    "result",
    "model",
    "request",
    "session",
    "store",
    "replica",
    "transcript",
    "lease",
    "turn",
    "step",
    "answer",
    "weather",
    "forecast",
    "invoice",
    "ledger",
    "shipment",
    "parcel",
    "booking",
    "flight",
    "hotel",
    "city",
    "temperature",
    "humidity",
    "north",
    "south",
    "east",
    "west",
    "morning",
    "evening",
    "price",
    "total",
    "amount",
]


class Payloads:
    """Distinct texts of about ``length`` characters: random words, so they compress
    about as well as real prose does (no long repeats for a compressor to fold)."""

    def __init__(self, seed: int = 7) -> None:
        self._random = random.Random(seed)
        self._count = 0

    def text(self, length: int = 1000) -> str:
        """A new text of about ``length`` characters, starting with a serial number."""
        self._count += 1
        words = [f"#{self._count}"]
        total = len(words[0])
        while total < length:
            word = self._random.choice(_WORDS)
            words.append(word)
            total += len(word) + 1
        return " ".join(words)
