"""A transcript subscribed to again after the replica serving the MCP session is SIGKILLed:
two ``steerable serve --protocol mcp`` processes on one SQLite file, behind bearer tokens.

A client of replica A sends a turn, subscribes to its transcript and steers it while the
turn is held in its first gated tool call; A is SIGKILLed. The MCP session died with A (its
id is A's memory only: B answers 404 for it), so the client opens a new MCP session on B and
subscribes again. B takes the turn over when A's lease expires, is told of it as it goes on,
and the turn ends with the steer taken exactly once and one answer.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.types import ServerNotification

from tests.cli.test_serve import Served
from tests.protocols.mcp.support import answer, connected, read_json, steered_ids

pytestmark = [
    pytest.mark.slow,
    # resources/subscribe is the 2025-11-25 way (the session's), deprecated by 2026-07-28's
    pytest.mark.filterwarnings("ignore:resources/subscribe is removed"),
]

SESSION, STEER = "s 1", "also this"
URI = "steerable://sessions/s%201/transcript"


def replica(store: str, name: str, tmp_path: Path) -> Served:
    tokens = tmp_path / "tokens"
    tokens.write_text("token-a acme\n")
    flags = ["--agent", "tests.service.gated_agent:two_gated_calls", "--lease", "1"]
    flags += ["--poll", "0.1", "--replica-id", name, "--tokens", str(tokens), "--protocol", "mcp"]
    env = {"STEERABLE_TEST_GATE": str(tmp_path / "gate")}
    return Served(store, *flags, log=tmp_path / f"{name}.log", env=env)


@asynccontextmanager
async def connected_as(base: str, token: str, ids: list[str]) -> AsyncIterator[ClientSession]:
    """As :func:`connected`, keeping the MCP session id the server gave in ``ids``."""

    async def kept(response: httpx2.Response) -> None:
        sid = response.headers.get("mcp-session-id")
        if sid and sid not in ids:
            ids.append(sid)

    async with (
        httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {token}"},
            timeout=httpx2.Timeout(30, read=120),
            event_hooks={"response": [kept]},
        ) as http,
        streamable_http_client(f"{base}/v1/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as client,
    ):
        await client.initialize()
        yield client


async def until(check: Callable[[], Awaitable[bool]], what: str, seconds: float = 20) -> None:
    for _ in range(int(seconds / 0.05)):
        if await check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never: {what}")


def open_gate(gate: Path, step: int) -> None:
    """Let the turn's gated call ``step`` return."""
    Path(f"{gate}.{step}").touch()


async def ping_status(base: str, sid: str) -> int:
    """The HTTP status of a ping on the MCP session ``sid`` at ``base``."""
    headers = {
        "Authorization": "Bearer token-a",
        "Accept": "application/json, text/event-stream",
        "mcp-session-id": sid,
        "mcp-protocol-version": "2025-11-25",
    }
    ping = {"jsonrpc": "2.0", "id": 9, "method": "ping"}
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        return (await http.post("/v1/mcp", json=ping, headers=headers)).status_code


async def test_a_subscriber_resubscribes_on_another_replica_after_a_sigkill(
    tmp_path: Path,
) -> None:
    store, gate = f"sqlite:///{tmp_path / 'mcp.db'}", tmp_path / "gate"
    a = replica(store, "a", tmp_path).start()  # alone: it claims the turn
    b = replica(store, "b", tmp_path)
    updates: list[str] = []

    async def heard(message: Any) -> None:
        if (
            isinstance(message, ServerNotification)
            and message.method == "notifications/resources/updated"
        ):
            updates.append(message.params.uri)

    try:
        ids: list[str] = []
        async with connected_as(a.url, "token-a", ids) as client:
            sent = answer(await client.call_tool("send", {"session": SESSION, "text": "go"}))
            turn = sent["turn"]

            async def running() -> bool:
                status = answer(await client.call_tool("status", {"session": SESSION}))
                return status["turn"] is not None and status["turn"]["state"] == "running"

            await until(running, "the turn ran on a")  # held in work(1) until gate.1
            await client.subscribe_resource(URI)
            args = {"session": SESSION, "text": STEER, "id": "st"}
            assert answer(await client.call_tool("steer", args))["turn"] == turn
            assert a.kill(signal.SIGKILL) == -signal.SIGKILL
        assert len(ids) == 1

        b.start()
        # The MCP session lived in A's memory only: B has never heard of its id.
        assert await ping_status(b.url, ids[0]) == 404
        async with connected(b.url, "token-a", message_handler=heard) as again:
            await again.subscribe_resource(URI)  # a new MCP session, subscribed again
            before = len(updates)  # b may already have told of its takeover
            # b, once a's lease is over, takes the turn over: its first step, redone (a wrote
            # nothing of it), takes st; then work(1) and work(2) return and it answers
            open_gate(gate, 1)
            open_gate(gate, 2)
            ended = answer(
                await again.call_tool("wait", {"session": SESSION, "turn": turn, "seconds": 30})
            )

            async def told() -> bool:  # of events after the gates opened, after subscribing
                return len(updates) > before and set(updates) == {URI}

            await until(told, "b told the new subscriber the transcript moved")
            messages = read_json(await again.read_resource(URI))["messages"]
            page = answer(await again.call_tool("transcript", {"session": SESSION}))
    finally:
        a.kill(signal.SIGKILL)
        b.kill()

    assert ended["state"] == "completed", ended
    assert ended["epoch"] == 2, ended  # b took the turn over from a
    assert page["messages"] == messages
    assert steered_ids(messages) == ["st"]
    steers = [m for m in messages if any(p.get("text") == STEER for p in m["parts"])]
    assert [(m["id"], m["role"], m["steered"], m["turn"]) for m in steers] == [
        ("st", "user", True, turn)
    ]
    output = ended["output"]
    assert output is not None and STEER in output
    answers = [m for m in messages if any(p.get("text") == output for p in m["parts"])]
    assert [(m["role"], m["turn"]) for m in answers] == [("assistant", turn)]
