"""PydanticAIAgent served by three replica processes on Postgres (the replica script's
``--agent``, the agent of ``replica_agent``)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from steerable import transcript_problems
from steerable.session import Session
from steerable.stores.url import open_url
from tests.service.replicas import Replicas, until

pytestmark = pytest.mark.slow

AGENT = "tests.integrations.pydantic_ai.replica_agent:weather_agent"


def _asked(group: Replicas) -> list[tuple[str, list[str]]]:
    if not group.requests_file.exists():
        return []
    lines = group.requests_file.read_text(encoding="utf-8").splitlines()
    return [(r["replica"], r["view"]) for r in map(json.loads, filter(None, lines))]


async def _count(group: Replicas, n: int) -> bool:
    return len(_asked(group)) >= n


async def _ended(replica: Any, turn: str) -> bool:
    view = await replica.call("turn", session="s", id=turn)
    return view is not None and view["state"] in ("completed", "failed", "stopped", "max_steps")


@pytest.fixture
async def postgres_url() -> AsyncIterator[str]:
    """A fresh Postgres database's URL (skipped, or failed, without a server)."""
    from tests.stores.postgres.support import fresh_database, server_address

    async with fresh_database("steerable_pydantic_ai_") as name:
        host, port = server_address()
        yield f"postgresql://postgres@{host}:{port}/{name}"


async def test_three_replicas_on_postgres_a_steer_through_another_is_taken_at_the_next_step(
    postgres_url: str, tmp_path: Path
) -> None:
    async with Replicas(postgres_url, tmp_path) as group:
        a, b, c = await group.start("a", "b", "c", agent=AGENT, lease=2.0, seconds=1.5)
        await a.call("send", session="s", text="plan my week", id="p")
        await until(lambda: _count(group, 1), "the first request")
        (server,) = [r for r, _ in _asked(group)]
        other = next(r for r in (a, b, c) if r.name != server)
        accepted = await other.call("steer", session="s", text="skip friday", id="k")
        await until(lambda: _ended(other, "p"), "the turn ended", seconds=60)
        view = await other.call("turn", session="s", id="p")
        asked = _asked(group)
        async with open_url(postgres_url) as store:
            stored = await Session("s", store).messages()
    assert accepted["turn"] == "p"
    assert (view["state"], view["text"]) == ("completed", "answered: plan my week | skip friday")
    # one replica ran the turn; its next request after the call had the steer, once, in place
    assert [replica for replica, _ in asked] == [server] * 2
    assert asked[1][1] == ["user:plan my week", "call:call-1", "return:call-1", "user:skip friday"]
    assert [(m.id, m.steered) for m in stored if m.text and m.role == "user"] == [
        ("p", False),
        ("k", True),
    ]
    assert transcript_problems(stored) == []
