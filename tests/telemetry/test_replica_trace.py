"""One trace across replicas: a POST's ``traceparent`` is kept with the input, and the turn's
span continues it on the replica that claims it, after the first holder is SIGKILLed too.

Both replicas are real ``steerable serve`` processes whose agent module sets the SDK with
an exporter that writes each span as it ends to one file (tests/telemetry/traced_agent.py).
Replica A claims the turn and kills itself inside its tool call; replica B, started once A
is dead, takes the turn over when A's lease expires and carries it to its answer.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.cli.test_serve import Served
from tests.service.replicas import until

pytestmark = pytest.mark.slow


@pytest.fixture(params=["sqlite", "postgres"])
async def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A fresh store for the replicas: a SQLite file, or a migrated Postgres database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'trace.db'}"
        return
    from tests.stores.postgres.support import fresh_database, url_of

    async with fresh_database("steerable_trace_") as name:
        yield url_of(name)


def _replica(url: str, tmp_path: Path, name: str, *, die: bool) -> Served:
    env = {"STEERABLE_TEST_SPANS": str(tmp_path / "spans.jsonl")}
    if die:
        env["STEERABLE_TEST_DIE_IN_TOOL"] = "1"
    flags = ("--agent", "tests.telemetry.traced_agent:traced", "--lease", "1", "--poll", "0.1")
    return Served(url, *flags, "--replica-id", name, log=tmp_path / f"{name}.log", env=env)


def _spans(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "spans.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _up_to(spans: list[dict[str, Any]], span: dict[str, Any], ancestor: str) -> bool:
    """Whether ``ancestor`` is above the span (FastAPI makes spans of each request it serves,
    and the input's span is under them)."""
    by_id = {s["span"]: s for s in spans}
    parent = span["parent"]
    while parent is not None and parent != ancestor and parent in by_id:
        parent = by_id[parent]["parent"]
    return bool(parent == ancestor)


async def test_a_turn_taken_over_after_a_sigkill_continues_the_post_s_trace(
    store_url: str, tmp_path: Path
) -> None:
    trace_id, parent = secrets.token_hex(16), secrets.token_hex(8)
    a = _replica(store_url, tmp_path, "a", die=True).start()
    b = _replica(store_url, tmp_path, "b", die=False)
    try:
        async with httpx.AsyncClient(base_url=a.url) as http:
            sent = await http.post(
                "/v1/sessions/s/messages",
                json={"text": "do the work", "id": "t"},
                headers={"traceparent": f"00-{trace_id}-{parent}-01"},
            )
            assert sent.status_code == 202, sent.text

        async def a_died() -> bool:
            return a.process is not None and a.process.poll() is not None

        await until(a_died, "replica a killed itself inside the tool")
        b.start()
        async with httpx.AsyncClient(base_url=b.url, timeout=70) as http:
            turn = (await http.get("/v1/sessions/s/turns/t", params={"wait": 60})).json()
    finally:
        a.kill()
        b.kill()
    assert turn["state"] == "completed", turn
    spans = _spans(tmp_path)

    # A: the send's span is a child of the POST's caller, in its trace; A's turn span never
    # ended (A died inside it), so it was never exported.
    (send,) = [s for s in spans if s["name"] == "steerable send"]
    assert send["trace"] == trace_id
    assert _up_to(spans, send, parent)
    turns = [s for s in spans if s["name"] == "invoke_agent ReActAgent"]
    assert [t["attributes"]["steerable.replica"] for t in turns] == ["b"]
    (carried,) = turns
    # B: the turn's span continues the same trace, under the send's span.
    assert (carried["trace"], carried["parent"]) == (trace_id, send["span"])
    assert carried["attributes"]["steerable.turn.resumed"] is True
    assert carried["attributes"]["steerable.turn.state"] == "completed"
    (takeover,) = [e for e in carried["events"] if e["name"] == "steerable.takeover"]
    epoch = carried["attributes"]["steerable.epoch"]
    assert takeover["attributes"]["steerable.holder"] == "b"
    assert takeover["attributes"]["steerable.epoch"] == epoch
    assert takeover["attributes"]["steerable.previous_epoch"] == epoch - 1
    assert takeover["attributes"]["steerable.previous_holder"] == "a"
    # Everything B did for the turn is in that trace, under its turn span.
    mine = [
        s
        for s in spans
        if s["pid"] == carried["pid"] and s["name"].startswith(("chat ", "execute_tool "))
    ]
    assert len(mine) == 3  # the carried-on call, the answer's request and the first's again
    assert {(s["trace"], s["parent"]) for s in mine} == {(trace_id, carried["span"])}
