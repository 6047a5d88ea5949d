"""A failed turn under ``steerable serve``: the log gets the text, the tenant a code.

A provider's error names the URL it called and can quote a key; an agent's exception can
say anything. The server's log gets it with the tenant, session, turn and traceback; what
the store records (and so every view: the turn, the status, the transcript, the events)
is a stable code and a safe line, unless ``--error-detail`` passes the text through.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from steerable.service._failure import AGENT_ERROR
from tests.cli.test_serve import Served, serve, served
from tests.models.wire import WireServer, openai_error

__all__ = ["served"]  # a fixture, used by name

pytestmark = pytest.mark.slow

SECRET = "sk-live-0123456789SECRET"

RAISING = f"""
from steerable.service_store import Outcome


class Raising:
    steers_per_turn = 0

    async def run_turn(self, turn) -> Outcome:
        raise RuntimeError("POST https://db.internal.test/v1?key={SECRET} failed")


AGENT = Raising()
"""


def no_keys() -> dict[str, str]:
    """The environment without any provider's settings (the wire server needs no key)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}


async def failed_turn(url: str) -> tuple[dict[str, Any], str]:
    """Send one input; the failed turn, and everything the tenant can read of the session."""
    from steerable.service.client import Client

    async with Client(url) as client:
        sent = await client.send("s1", "hello")
        turn = await client.turn("s1", sent.turn, wait=30)
        seen: list[object] = [turn, await client.status("s1"), await client.transcript("s1")]
        async for event in client.events("s1", after=0):
            seen.append(event)
            if event.kind == "turn_ended":
                break
    return turn, repr(seen)


async def test_a_provider_error_is_logged_and_the_tenant_gets_a_code(
    tmp_path: Path, served: list[Served]
) -> None:
    refusal = openai_error(401, f"Incorrect API key provided: {SECRET}")
    with WireServer(refusal) as model:
        flags = ("--model", "openai:m", "--base-url", f"{model.url}/v1")
        log = tmp_path / "serve.log"
        server = serve(served, f"sqlite:///{tmp_path / 's.db'}", *flags, log=log, env=no_keys())
        turn, seen = await failed_turn(server.url)
    assert (turn["state"], turn["error"]) == ("failed", AGENT_ERROR)
    assert SECRET not in seen and model.url not in seen
    logged = server.text()
    [line] = [line for line in logged.splitlines() if "failed: " in line]
    assert f"turn {turn['id']!r} of session 'default/s1' (tenant 'default') failed" in line
    assert SECRET in line and model.url in line  # the operator's log has it all
    assert "Traceback" in logged  # the exception the run ended with


async def test_an_agent_that_raises_is_logged_with_its_traceback(
    tmp_path: Path, served: list[Served]
) -> None:
    module = tmp_path / "raising_agent.py"
    module.write_text(RAISING)
    log = tmp_path / "serve.log"
    server = serve(served, f"sqlite:///{tmp_path / 's.db'}", "--agent", f"{module}:AGENT", log=log)
    turn, seen = await failed_turn(server.url)
    assert (turn["state"], turn["error"]) == ("failed", AGENT_ERROR)
    assert SECRET not in seen and "db.internal.test" not in seen
    logged = server.text()
    assert f"RuntimeError: POST https://db.internal.test/v1?key={SECRET} failed" in logged
    assert 'in run_turn\n    raise RuntimeError("POST' in logged  # the agent's own frame


async def test_error_detail_passes_the_text_through_for_development(
    tmp_path: Path, served: list[Served]
) -> None:
    module = tmp_path / "raising_agent.py"
    module.write_text(RAISING)
    server = serve(
        served,
        f"sqlite:///{tmp_path / 's.db'}",
        "--agent",
        f"{module}:AGENT",
        "--error-detail",
        log=tmp_path / "serve.log",
    )
    turn, _ = await failed_turn(server.url)
    assert turn["error"] == f"RuntimeError: POST https://db.internal.test/v1?key={SECRET} failed"
    assert SECRET in server.text()  # logged all the same
