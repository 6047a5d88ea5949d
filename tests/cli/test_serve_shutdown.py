"""SIGTERM while a client follows events and a turn runs: ``steerable serve`` exits.

uvicorn alone waits for every response to finish, and an event stream never does. Now the
stream ends cleanly as the shutdown begins (the client's read ends, no error), the process
exits within its grace, and the running turn's lease is released rather than left to
expire: another replica carries the turn on at once. On SQLite and Postgres.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.cli.test_serve import Served, postgres_url, serve, served

__all__ = ["served"]  # a fixture, used by name

pytestmark = pytest.mark.slow

LEASE = 120.0  # far longer than the test: a takeover before it means the lease was released


@pytest.fixture(params=["sqlite", "postgres"])
async def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A migrated database the replicas share."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 's.db'}"
        return
    from tests.stores.postgres.support import fresh_database

    async with fresh_database("steerable_serve_", migrated=True) as name:
        yield postgres_url(name)


async def running(url: str, session: str) -> dict[str, object]:
    """The session's turn, once it runs a tool (its first step is saved)."""
    from steerable.service.client import Client

    async with Client(url) as client:
        for _ in range(600):
            turn = (await client.status(session))["turn"]
            if turn is not None and turn["state"] == "running" and turn["steps"] >= 1:
                return dict(turn)
            await asyncio.sleep(0.05)
    raise AssertionError("the turn never got to its tool")


async def test_sigterm_ends_the_event_stream_exits_and_hands_the_turn_on(
    tmp_path: Path, served: list[Served], store_url: str
) -> None:
    flags = ("--agent", "examples.agents.two_tools:AGENT", "--lease", str(LEASE), "--grace", "2")
    slow = {"STEERABLE_TOOL_SECONDS": "600"}  # the tool outlives the process
    one = serve(served, store_url, *flags, "--replica-id", "one", log=tmp_path / "1", env=slow)
    from steerable.service.client import Client

    async with Client(one.url) as client:
        sent = await client.send("s1", "hello")
    turn = await running(one.url, "s1")
    assert turn["holder"] == "one"

    frames: list[str] = []
    async with (
        httpx.AsyncClient(base_url=one.url, timeout=httpx.Timeout(5, read=60)) as http,
        http.stream("GET", "/v1/sessions/s1/events") as response,
    ):
        lines = response.aiter_lines()
        async for line in lines:  # the stream is up: it has sent the turn's first events
            frames.append(line)
            if line.startswith("event: step"):
                break
        one.process.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        async with asyncio.timeout(30):  # without the fix it never ends
            frames += [line async for line in lines]  # ends cleanly: no error raised
    assert await asyncio.to_thread(one.process.wait, 30) in (0, -signal.SIGTERM)  # type: ignore[union-attr]
    assert "Application shutdown complete" in one.text()

    # released: the lease ends now, not LEASE seconds after the last renewal
    fast = {"STEERABLE_TOOL_SECONDS": "0.05"}
    two = serve(served, store_url, *flags, "--replica-id", "two", log=tmp_path / "2", env=fast)
    async with Client(two.url) as client:
        done = await client.turn("s1", sent.turn, wait=30)
    assert (done["state"], done["output"]) == ("completed", "answered: hello"), done
    assert time.time() < float(str(turn["lease_expires_at"]))  # it was taken before expiry
