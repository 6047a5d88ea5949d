"""``steerable mcp`` over stdio as a desktop client runs it: a real subprocess that
``stdio_client`` starts, speaking MCP on its stdin and stdout.

One process serves turns (``--agent``) and its client sends; a second process, with no
agent, over the same SQLite file, steers the turn the first client started: any MCP client
steers an agent another one started. Bad flags are one line and exit status 2.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from tests.protocols.mcp.support import answer, steered_ids

ROOT = Path(__file__).resolve().parents[3]
AGENT = "tests.service.gated_agent:two_gated_calls"


@asynccontextmanager
async def desktop(store: str, gate: Path, *flags: str) -> AsyncIterator[ClientSession]:
    """A client of a ``steerable mcp`` subprocess, as Claude Desktop starts one."""
    env = {**os.environ, "STEERABLE_TEST_GATE": str(gate), "PYTHONPATH": str(ROOT)}
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "steerable.cli", "mcp", "--store", store, *flags],
        env=env,
        cwd=str(ROOT),
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
        await client.initialize()
        yield client


async def test_a_desktop_client_sends_and_another_steers(tmp_path: Path) -> None:
    store, gate = f"sqlite:///{tmp_path / 'mcp.db'}", tmp_path / "gate"
    async with desktop(store, gate, "--agent", AGENT) as serving:
        tools = {t.name for t in (await serving.list_tools()).tools}
        assert tools == {"send", "steer", "stop", "status", "wait", "transcript"}
        sent = answer(await serving.call_tool("send", {"session": "d", "text": "go", "id": "p"}))
        assert sent["state"] == "started"
        for _ in range(400):
            status = answer(await serving.call_tool("status", {"session": "d"}))
            if status["turn"] is not None and status["turn"]["state"] == "running":
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the turn never ran")
        async with desktop(store, gate) as other:  # no agent: it only sends and steers
            args = {"session": "d", "text": "and this", "id": "st"}
            assert answer(await other.call_tool("steer", args))["turn"] == "p"
            await asyncio.to_thread(Path(f"{gate}.1").touch)
            fated = answer(await other.call_tool("steer", {**args, "wait": 20}))
            assert fated["fate"] == {"state": "taken", "turn": "p", "step": 2}
        await asyncio.to_thread(Path(f"{gate}.2").touch)
        turn = answer(await serving.call_tool("wait", {"session": "d", "turn": "p"}))
        assert turn["state"] == "completed"
        page = answer(await serving.call_tool("transcript", {"session": "d"}))
        assert steered_ids(page["messages"]) == ["st"]


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        ((), "--store"),
        (("--store", "sqlite:///x.db", "--tenant", "a/b"), "--tenant"),
        (("--store", "sqlite:///x.db", "--agent", "no_such_module:X"), "--agent"),
    ],
)
def test_bad_input_is_one_line_and_status_2(
    tmp_path: Path, flags: tuple[str, ...], said: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "steerable.cli", "mcp", *flags],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("steerable mcp: ") and said in lines[0]
