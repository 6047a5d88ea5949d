"""MCP over streamable HTTP at /v1/mcp, driven by the ``mcp`` package's ClientSession.

One client sends, another steers the turn it started (taken at its next step, once in the
transcript), a steer that comes after the turn's last step is a turn of its own, a
subscriber is told the transcript moved while the turn runs, stop ends a turn, and another
tenant's token reaches none of it. The agent's tool calls wait on gate files
(tests/service/gated_agent.py), so "the turn is running" is certain while we steer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp.shared.exceptions import MCPError
from mcp.types import ServerNotification

from steerable.service.agent import ReActAgent
from steerable.service.demo import DemoModel
from steerable.service.http._limits import Limits
from steerable.service.http.mcp._resources import TEMPLATE
from steerable.spec import Spec
from tests.protocols.mcp.support import answer, connected, read_json, steered_ids, text_of
from tests.service.gated_agent import two_gated_calls, work
from tests.service.http.conftest import Build, LiveServer, app_over, serve_app

__all__ = ["serve_app"]

TOKENS = {"token-a": "acme", "token-b": "bravo"}


@pytest.fixture
def gate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The gate files' stem: ``open(gate, n)`` lets the turn's step ``n`` return."""
    stem = tmp_path / "gate"
    monkeypatch.setenv("STEERABLE_TEST_GATE", str(stem))
    return stem


def open_gate(stem: Path, step: int) -> None:
    Path(f"{stem}.{step}").touch()


@pytest.fixture
def server(serve_app: Callable[[Build], LiveServer], tmp_path: Path, gate: Path) -> LiveServer:
    url = f"sqlite:///{tmp_path / 'mcp.db'}"
    return serve_app(app_over(url, agent=two_gated_calls(), tokens=TOKENS, protocols=["mcp"]))


async def until(check: Callable[[], Any], seconds: float = 20) -> Any:
    for _ in range(int(seconds / 0.05)):
        found = await check()
        if found:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError("never happened")


async def test_tools_and_resources_are_listed(server: LiveServer) -> None:
    async with connected(server.url, "token-a") as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        assert tools == {"send", "steer", "stop", "status", "wait", "transcript"}
        templates = (await client.list_resource_templates()).resource_templates
        assert [t.uri_template for t in templates] == [TEMPLATE]
        caps = client.server_capabilities
        assert caps is not None and caps.resources is not None and caps.resources.subscribe


# resources/subscribe is the 2025-11-25 way (the session's), deprecated by 2026-07-28's listen
@pytest.mark.filterwarnings("ignore:resources/subscribe is removed")
async def test_one_client_sends_another_steers_the_running_turn(
    server: LiveServer, gate: Path
) -> None:
    updates: list[str] = []

    async def heard(message: ServerNotification | Exception) -> None:
        if (
            not isinstance(message, Exception)
            and message.method == "notifications/resources/updated"
        ):
            updates.append(message.params.uri)

    uri = "steerable://sessions/s%201/transcript"
    async with connected(server.url, "token-a") as sender:
        sent = answer(await sender.call_tool("send", {"session": "s 1", "text": "go", "id": "p"}))
        assert sent == {"id": "p", "turn": "p", "state": "started", "ahead": 0}

        async def running() -> bool:
            status = answer(await sender.call_tool("status", {"session": "s 1"}))
            return status["turn"] is not None and status["turn"]["state"] == "running"

        await until(running)
        async with connected(server.url, "token-a", message_handler=heard) as watcher:
            await watcher.subscribe_resource(uri)
            async with connected(server.url, "token-a") as steerer:
                args = {"session": "s 1", "text": "also this", "id": "st"}
                steered = answer(await steerer.call_tool("steer", args))
                assert steered["turn"] == "p"
                again = answer(await steerer.call_tool("steer", args))  # the same id: once
                assert again["id"] == "st"
                open_gate(gate, 1)  # step 1 returns: the next step takes the steer
                fated = answer(await steerer.call_tool("steer", {**args, "wait": 20}))
                assert fated["fate"] == {"state": "taken", "turn": "p", "step": 2}
            open_gate(gate, 2)
            turn = answer(await sender.call_tool("wait", {"session": "s 1", "turn": "p"}))
            assert turn["state"] == "completed"

            async def heard_it() -> bool:
                return uri in updates

            await until(heard_it)  # told while the turn ran (and as it ended)
        read = await sender.read_resource(uri)
        messages = read_json(read)["messages"]
        assert steered_ids(messages) == ["st"]  # exactly once
        page = answer(await sender.call_tool("transcript", {"session": "s 1"}))
        assert steered_ids(page["messages"]) == ["st"]
        listed = read_json(await sender.read_resource("steerable://sessions"))
        assert [s["session"] for s in listed["sessions"]] == ["s 1"]


async def test_a_steer_the_turn_cannot_take_becomes_its_own_turn(
    serve_app: Callable[[Build], LiveServer], tmp_path: Path, gate: Path
) -> None:
    """The turn writes its answer (a slow model) when the steer comes: it ends without
    another step, frees the steer, and ``steer`` with ``wait`` says it is a turn."""
    agent = ReActAgent(Spec(tools=[work], max_steps=6), DemoModel(calls=1, delay=2.0))
    url = f"sqlite:///{tmp_path / 'own.db'}"
    server = serve_app(app_over(url, agent=agent, tokens=TOKENS, protocols=["mcp"]))
    open_gate(gate, 1)
    async with connected(server.url, "token-a") as client:
        answer(await client.call_tool("send", {"session": "s", "text": "plan", "id": "p"}))

        async def answering() -> bool:  # step 2 saved: the model is writing the answer
            turn = answer(await client.call_tool("status", {"session": "s"}))["turn"]
            return turn is not None and turn["id"] == "p" and turn["steps"] == 2

        await until(answering)
        args = {"session": "s", "text": "and more", "id": "st", "wait": 20}
        steered = answer(await client.call_tool("steer", args))
        assert steered == {
            "id": "st",
            "turn": "p",
            "fate": {"state": "turn", "turn": "st", "step": None},
        }
        first = answer(await client.call_tool("wait", {"session": "s", "turn": "p"}))
        own = answer(await client.call_tool("wait", {"session": "s", "turn": "st"}))
        status = answer(await client.call_tool("status", {"session": "s"}))
        page = answer(await client.call_tool("transcript", {"session": "s"}))

    assert (first["state"], first["steers_taken"]) == ("completed", 0)
    assert first["output"] == "answered: plan"
    assert (own["state"], own["output"]) == ("completed", "answered: and more")
    assert status["turn"] is None and status["waiting_total"] == 0
    mine = [(m["turn"], m["steered"]) for m in page["messages"] if m["id"] == "st"]
    assert mine == [("st", False)]  # once, as the prompt of its own turn
    assert steered_ids(page["messages"]) == []


async def test_stop_ends_the_running_turn(server: LiveServer, gate: Path) -> None:
    async with connected(server.url, "token-a") as client:
        answer(await client.call_tool("send", {"session": "t", "text": "go", "id": "p"}))

        async def running() -> bool:
            status = answer(await client.call_tool("status", {"session": "t"}))
            return status["turn"] is not None and status["turn"]["state"] == "running"

        await until(running)
        assert answer(await client.call_tool("stop", {"session": "t"})) == {"turn": "p"}
        open_gate(gate, 1)
        turn = answer(await client.call_tool("wait", {"session": "t", "turn": "p"}))
        assert turn["state"] == "stopped"


async def test_another_tenant_reaches_nothing(server: LiveServer, gate: Path) -> None:
    open_gate(gate, 1)
    open_gate(gate, 2)
    async with connected(server.url, "token-a") as acme:
        answer(await acme.call_tool("send", {"session": "mine", "text": "go", "id": "p"}))
        answer(await acme.call_tool("wait", {"session": "mine", "turn": "p"}))
    async with connected(server.url, "token-b") as bravo:
        for name in ("status", "stop", "transcript"):
            result = await bravo.call_tool(name, {"session": "mine"})
            assert result.is_error and "session_not_found" in text_of(result)
        result = await bravo.call_tool("wait", {"session": "mine", "turn": "p", "seconds": 1})
        assert result.is_error and "turn_not_found" in text_of(result)
        with pytest.raises(MCPError, match="session_not_found"):
            await bravo.read_resource("steerable://sessions/mine/transcript")
        listed = read_json(await bravo.read_resource("steerable://sessions"))
        assert listed["sessions"] == []
        uris = [r.uri for r in (await bravo.list_resources()).resources]
        assert uris == ["steerable://sessions"]


async def test_no_token_no_mcp(server: LiveServer) -> None:
    with pytest.raises(Exception):  # noqa: B017, PT011 - the transport's error on a 401
        async with connected(server.url, None):
            pass


async def test_an_mcp_session_is_its_tenants(server: LiveServer) -> None:
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    accept = {"Accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        opened = await http.post(
            "/v1/mcp", json=init, headers={**accept, "Authorization": "Bearer token-a"}
        )
        assert opened.status_code == 200
        sid = opened.headers["mcp-session-id"]
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        for token, status in (("token-b", 404), ("token-a", 200)):
            headers = {**accept, "Authorization": f"Bearer {token}", "mcp-session-id": sid}
            headers["mcp-protocol-version"] = "2025-11-25"
            answered = await http.post("/v1/mcp", json=ping, headers=headers)
            assert answered.status_code == status


@pytest.mark.filterwarnings("ignore:resources/subscribe is removed")
async def test_a_closed_mcp_session_gives_back_its_subscriptions(
    serve_app: Callable[[Build], LiveServer], tmp_path: Path, gate: Path
) -> None:
    """A subscription ends with its MCP session: with one stream a tenant, a second client
    can subscribe once the first has closed its session (it was refused before, the first
    subscription followed on until the process ended)."""
    open_gate(gate, 1)
    open_gate(gate, 2)
    url = f"sqlite:///{tmp_path / 'one.db'}"
    one = Limits(streams=1)
    server = serve_app(
        app_over(url, agent=two_gated_calls(), tokens=TOKENS, protocols=["mcp"], limits=one)
    )
    uri = "steerable://sessions/idle/transcript"
    async with connected(server.url, "token-a") as first:
        answer(await first.call_tool("send", {"session": "idle", "text": "go", "id": "p"}))
        answer(await first.call_tool("wait", {"session": "idle", "turn": "p"}))
        await first.subscribe_resource(uri)
    async with connected(server.url, "token-a") as other:  # the store moves after it left
        answer(await other.call_tool("send", {"session": "idle", "text": "more", "id": "q"}))
        answer(await other.call_tool("wait", {"session": "idle", "turn": "q"}))
    async with connected(server.url, "token-a") as second:
        await second.subscribe_resource(uri)  # the tenant's one stream is free again
        async with connected(server.url, "token-a") as third:
            with pytest.raises(MCPError, match="too_many_streams"):
                await third.subscribe_resource(uri)  # and the bound still holds
