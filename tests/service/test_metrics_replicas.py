"""Three ``steerable serve --metrics`` replicas over one Postgres: summed, their metrics equal
what the views of the sessions say.

The turns' two tool calls wait on gates the test opens, so steers sent through other
replicas certainly reach a running turn and are taken at its next step; steers sent to idle
sessions become turns of their own. Once every session is idle, each replica's ``/metrics``
is scraped: the steers taken summed over the three are the steered messages of the
transcripts, the turns ended are the turns of the views, and nothing runs or waits.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from steerable.service_store import END_STATES
from tests.cli.test_serve import Served, postgres_url
from tests.service.replicas import until

pytestmark = pytest.mark.slow

AGENT = "tests.service.gated_agent:two_gated_calls"
BUSY = tuple(f"busy{i}" for i in range(6))  # a send each, steered while its tools wait
IDLE = tuple(f"idle{i}" for i in range(3))  # a steer each with nothing running: its own turn


Sums = dict[tuple[str, frozenset[tuple[str, str]]], float]


def summed(texts: list[str]) -> Sums:
    """Each sample's value summed over the replicas' expositions."""
    total: Sums = {}
    for text in texts:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                key = (sample.name, frozenset(sample.labels.items()))
                total[key] = total.get(key, 0.0) + sample.value
    return total


def one(total: Sums, name: str, **labels: str) -> float:
    """The summed value of one series (0 when no replica has it)."""
    return total.get((name, frozenset(labels.items())), 0.0)


def steps_at_least(http: httpx.AsyncClient, sid: str, steps: int) -> Callable[[], Awaitable[bool]]:
    """Whether the session's running turn has stored ``steps`` steps (a tool waits now)."""

    async def check() -> bool:
        turn = (await http.get(f"/v1/sessions/{sid}")).json()["turn"]
        return bool(turn and turn["steps"] >= steps)

    return check


async def test_three_replicas_metrics_sum_to_what_the_views_say(tmp_path: Path) -> None:
    from tests.stores.postgres.support import fresh_database

    gate = tmp_path / "gate"
    async with fresh_database("steerable_metrics_") as name:
        replicas = [
            Served(
                postgres_url(name),
                "--metrics",
                "--agent",
                AGENT,
                "--poll",
                "0.1",
                "--replica-id",
                f"r{i}",
                log=tmp_path / f"r{i}.log",
                env={"STEERABLE_TEST_GATE": str(gate)},
            )
            for i in range(3)
        ]
        try:
            await asyncio.gather(*(asyncio.to_thread(r.start) for r in replicas))
            texts, views = await _drive(replicas, gate)
        finally:
            for replica in replicas:
                replica.kill()

    total = summed(texts)
    turns, steered, own_turns = views
    assert len(turns) == len(BUSY) + 1 + len(IDLE)
    assert steered >= 2 * len(BUSY) + len(IDLE)  # the steers sent while tools waited
    assert one(total, "steerable_steers_total", fate="taken") == steered
    assert one(total, "steerable_steer_wait_seconds_count") == steered
    assert own_turns == len(IDLE)
    assert one(total, "steerable_steers_total", fate="own_turn") == own_turns
    states = Counter(t["state"] for t in turns)
    assert states == {"completed": len(turns)}
    for state in END_STATES:
        assert one(total, "steerable_turns_ended_total", state=state) == states[state], state
    assert one(total, "steerable_claims_total", kind="fresh") == len(turns)
    assert one(total, "steerable_claims_total", kind="takeover") == 0
    assert one(total, "steerable_running_turns") == 0
    assert one(total, "steerable_queue_depth") == 0  # each replica reads the same store
    assert one(total, "steerable_fenced_total") == 0


async def _drive(
    replicas: list[Served], gate: Path
) -> tuple[list[str], tuple[list[dict[str, Any]], int, int]]:
    """Sends and steers through every replica, the gates opened in turn, until all is idle;
    then each replica's exposition, and the turns, steered messages and steers that became
    turns of their own, as the views say."""
    clients = [httpx.AsyncClient(base_url=r.url, timeout=30) for r in replicas]
    try:
        for i, sid in enumerate(BUSY):
            http = clients[i % 3]
            sent = await http.post(f"/v1/sessions/{sid}/messages", json={"text": "go", "id": sid})
            assert sent.status_code == 202, sent.text
        for sid in BUSY:  # its first tool call waits at gate 1
            await until(steps_at_least(clients[0], sid, 1), f"{sid} runs")
        for i, sid in enumerate(BUSY):
            for k in (1, 2):
                steer = {"text": f"steer {k}", "id": f"{sid}-s{k}"}
                answer = await clients[(i + k) % 3].post(f"/v1/sessions/{sid}/steers", json=steer)
                assert answer.json()["turn"] == sid  # offered to the running turn
        later = {"text": "later", "id": "later"}
        assert (await clients[1].post(f"/v1/sessions/{BUSY[0]}/messages", json=later)).json()[
            "state"
        ] == "queued"
        for i, sid in enumerate(IDLE):
            first = {"text": "a steer alone", "id": f"{sid}-own"}
            own = await clients[i % 3].post(f"/v1/sessions/{sid}/steers", json=first)
            assert own.json()["turn"] is None  # nothing runs nor waits: a turn of its own
            second = {"text": "and another", "id": f"{sid}-s"}
            joined = await clients[(i + 1) % 3].post(f"/v1/sessions/{sid}/steers", json=second)
            assert joined.json()["turn"] == f"{sid}-own"
        await asyncio.to_thread(Path(f"{gate}.1").touch)
        for sid in BUSY:  # now its second call waits at gate 2: one more step to come
            await until(steps_at_least(clients[0], sid, 2), f"{sid} step 2")
        for i, sid in enumerate(BUSY[:3]):
            steer = {"text": "one more", "id": f"{sid}-s3"}
            answer = await clients[i].post(f"/v1/sessions/{sid}/steers", json=steer)
            assert answer.json()["turn"] == sid
        await asyncio.to_thread(Path(f"{gate}.2").touch)

        async def idle() -> bool:
            for state in ("running", "queued"):
                page = await clients[2].get("/v1/sessions", params={"state": state})
                if page.json()["sessions"]:
                    return False
            return True

        await until(idle, "every session is idle", seconds=60)
        texts = [(await http.get("/metrics")).text for http in clients]
        return texts, await _views(clients[0])
    finally:
        for http in clients:
            await http.aclose()


async def _views(http: httpx.AsyncClient) -> tuple[list[dict[str, Any]], int, int]:
    """Every turn, the steered messages, and the steers that are turns of their own."""
    turns: list[dict[str, Any]] = []
    steered = own = 0
    for sid in (*BUSY, *IDLE):
        turns += (await http.get(f"/v1/sessions/{sid}/turns")).json()["turns"]
        messages = (await http.get(f"/v1/sessions/{sid}/transcript")).json()["messages"]
        steered += sum(1 for m in messages if m["steered"])
        inputs = (await http.get(f"/v1/sessions/{sid}/inputs")).json()["inputs"]
        own += sum(1 for i in inputs if i["kind"] == "steer" and i["state"] == "turn")
    return turns, steered, own
