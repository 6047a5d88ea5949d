"""``steerable serve``'s bounds as flags, through real processes: a connection that sends no
request head is closed, an idle keep-alive one too, the session's queue is bounded, and a
bad bound is one line."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from tests.cli.test_serve import ROOT, Served, cli, serve, served

__all__ = ["served"]  # the fixture, used by name

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--tenant-rate", "-1"),
        ("--tenant-burst", "0"),
        ("--max-waiting", "-3"),
        ("--body-timeout", "0"),
        ("--head-timeout", "nan"),
        ("--stop-poll", "-0.5"),
        ("--max-connections", "-1"),
    ],
)
def test_a_bad_bound_is_one_line_naming_it(flag: str, value: str) -> None:
    done = cli("serve", "--store", "sqlite:///x.db", flag, value)
    assert done.returncode == 2, done.stderr
    assert flag in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (ROOT / "x.db").exists()


async def _closed(host: str, port: int, sending: bytes) -> bool:
    """Whether the server closes a connection that sent ``sending`` and then nothing."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(sending)
        await writer.drain()
        while True:
            data = await asyncio.wait_for(reader.read(65536), 15)
            if not data:
                return True
    except TimeoutError:
        return False
    finally:
        writer.close()


async def test_silent_slow_and_idle_connections_are_closed(
    tmp_path: Path, served: list[Served]
) -> None:
    store = f"sqlite:///{tmp_path / 'bounds.db'}"
    server = serve(
        served,
        store,
        "--head-timeout",
        "0.5",
        "--keep-alive",
        "0.5",
        "--max-waiting",
        "2",
        log=tmp_path / "serve.log",
    )
    host, port = server.host, server.port
    silent, slow, idle = await asyncio.gather(
        _closed(host, port, b""),
        _closed(host, port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n"),  # a head never ended
        _closed(host, port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"),  # answered, then idle
    )
    assert (silent, slow, idle) == (True, True, True)
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
        agent_free = {"text": "x"}
        answers = [
            await http.post("/v1/sessions/q/messages", json=agent_free | {"id": f"m{i}"})
            for i in range(4)
        ]
    # the first starts a turn; one more waits; the queue holds 2 waiting at most
    statuses = [a.status_code for a in answers]
    assert statuses.count(429) >= 1 and statuses[0] == 202, statuses
    assert "Traceback" not in server.text()
