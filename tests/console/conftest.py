"""The console's browser tests: a real ``steerable serve`` (SQLite, one process; or Postgres,
two replicas behind nginx) and Debian's headless Chromium driven by Playwright.

Playwright's own browser download cannot work here, so the tests launch the system's
``/usr/bin/chromium`` (Debian's ``chromium`` package, installed by ``.ci/run``). Without it
they skip, or fail when ``STEERABLE_REQUIRE_SERVERS=1``.

The replicas serve :func:`tests.service.http.test_load_balancer.held_agent`: two ``work``
calls a turn, each waiting while the test's hold file exists, so "during a tool call" is
a certainty rather than a race with a timer.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.cli.test_serve import Served, postgres_url
from tests.service.http.nginx import Nginx, nginx_binary
from tests.service.http.test_load_balancer import Hold

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
AGENT = "tests.service.http.test_load_balancer:held_agent"
TOKENS = {"t-acme": "acme", "t-other": "other"}
"""The servers' tokens: the page signs in as ``acme``; ``other`` is another tenant."""


def _missing(reason: str) -> None:
    if os.environ.get("STEERABLE_REQUIRE_SERVERS") == "1":
        pytest.fail(f"{reason} (STEERABLE_REQUIRE_SERVERS=1)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture
def chromium() -> str:
    """The system's Chromium; skip (or fail in CI) without it or without Playwright."""
    if not os.access(CHROMIUM, os.X_OK):
        _missing(f"no {CHROMIUM} (Debian: apt-get install chromium)")
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        _missing("playwright is not installed (pip install -e '.[dev]')")
    return CHROMIUM


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class Site:
    """What the browser talks to: its URL, the servers behind it, the agent's tool hold."""

    kind: str
    url: str
    servers: dict[str, Served]
    hold: Hold
    store: str
    flags: list[str]
    env: dict[str, str]
    tmp: Path
    nginx: Nginx | None = None
    restarted: list[Served] = field(default_factory=list)

    def api(self, token: str = "t-acme") -> httpx.AsyncClient:
        """An HTTP client of the API as a tenant (``acme`` by default)."""
        headers = {"Authorization": f"Bearer {token}"}
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=30)

    async def restart(self, name: str) -> None:
        """Start replica ``name`` again on its own port (after a SIGKILL)."""
        old = self.servers[name]
        again = Served(
            self.store,
            *self.flags,
            "--replica-id",
            f"{name}b",
            "--port",
            str(old.port),
            log=self.tmp / f"{name}b.log",
            env=self.env,
        )
        self.restarted.append(again)
        await asyncio.to_thread(again.start)


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """The store's URL: a SQLite file, or a new migrated Postgres database (dropped after)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'console.db'}"
        return
    if nginx_binary() is None:
        _missing("nginx is not installed (Debian: apt-get install nginx)")
    from tests.stores.postgres.support import fresh_database

    async with fresh_database("steerable_console_") as name:
        yield postgres_url(name)


@pytest.fixture
async def site(store: str, tmp_path: Path) -> AsyncIterator[Site]:
    """One ``steerable serve`` over SQLite, or two over Postgres behind nginx, with tokens."""
    kind = "sqlite" if store.startswith("sqlite") else "postgres"
    tokens = tmp_path / "tokens"
    tokens.write_text("".join(f"{t} {tenant}\n" for t, tenant in TOKENS.items()))
    flags = ["--agent", AGENT, "--tokens", str(tokens), "--lease", "2", "--poll", "0.2"]
    env = {"STEERABLE_TEST_HOLD": str(tmp_path)}
    names = ["r0"] if kind == "sqlite" else ["r0", "r1"]
    if kind == "sqlite":  # a port of its own, to come back on after a SIGKILL
        flags += ["--port", str(_free_port())]
    servers = {
        name: Served(store, *flags, "--replica-id", name, log=tmp_path / f"{name}.log", env=env)
        for name in names
    }
    site: Site | None = None
    try:
        await asyncio.gather(*(asyncio.to_thread(s.start) for s in servers.values()))
        if kind == "sqlite":
            url, nginx = servers["r0"].url, None
        else:
            ports = [s.port for s in servers.values()]
            nginx = await asyncio.to_thread(Nginx(ports, tmp_path / "nginx").start)
            url = nginx.url
        site = Site(kind, url, servers, Hold(tmp_path), store, flags, env, tmp_path, nginx)
        yield site
    finally:
        if site is not None and site.nginx is not None:
            await asyncio.to_thread(site.nginx.stop)
        for server in [*servers.values(), *(site.restarted if site else [])]:
            await asyncio.to_thread(server.kill, signal.SIGKILL)
