"""Three replica processes on one Postgres database serving the LangGraph agent.

``scripts/service_replica.py --agent tests.integrations.langgraph.served:agent``, through
the service's replica harness: a send through one replica, a steer through another, taken
by the holder at its next step; the holder SIGKILLed mid-tool, the turn carried on by
another from the stored transcript with each input once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from steerable.integrations.langgraph import from_stored
from steerable.messages import Message
from steerable.service import Service
from steerable.stores.url import open_url
from tests.integrations.langgraph.chat import valid
from tests.integrations.langgraph.support import shape
from tests.service.replicas import Replicas, until

pytestmark = pytest.mark.slow

AGENT = "tests.integrations.langgraph.served:agent"


async def _asked(group: Replicas, turn: str, count: int) -> bool:
    return len(group.requests(turn)) >= count


async def _holder(group: Replicas, turn: str) -> str:
    await until(lambda: _asked(group, turn, 1), f"a model request of turn {turn}")
    name: str = group.requests(turn)[0]["replica"]
    return name


async def _transcript(view: Service, session: str) -> list[Message]:
    return [e.message for e in await view.transcript(session, limit=1000)]


def _ids(request: dict[str, Any]) -> list[str]:
    return [m["id"] for m in request["messages"]]


async def test_three_replicas_serve_it_and_a_steer_through_another_is_taken_at_the_next_step(
    postgres_url: str, tmp_path: Path
) -> None:
    async with (
        Replicas(postgres_url, tmp_path) as group,
        open_url(postgres_url + "?pool=2") as store,
    ):
        view = Service(store)
        await group.start("a", "b", "c", lease=2, seconds=1.0, agent=AGENT)
        await group["a"].call("send", session="s", text="plan my week", id="p")
        holder = await _holder(group, "p")
        steerer = group.others(holder)[0]
        steer = await steerer.call("steer", session="s", text="skip friday", id="k")
        done = await view.wait("s", "p", seconds=30)
        stored = await _transcript(view, "s")
        requests = group.requests("p")
    assert steer["turn"] == "p"
    assert done is not None and (done.state, done.text) == (
        "completed",
        "answered: plan my week | skip friday",
    )
    assert len(requests) == 2 and {r["replica"] for r in requests} == {holder}
    second = requests[1]["messages"]
    assert second[-2]["result"] and (second[-1]["id"], second[-1]["steered"]) == ("k", True)
    assert _ids(requests[1]).count("k") == 1
    assert shape(stored) == ["user:plan my week", "ai", "tool", "steer:skip friday", "ai"]
    assert valid(from_stored(stored))


async def test_a_holder_killed_mid_tool_is_carried_on_by_another_with_the_steer_once(
    postgres_url: str, tmp_path: Path
) -> None:
    async with (
        Replicas(postgres_url, tmp_path) as group,
        open_url(postgres_url + "?pool=2") as store,
    ):
        view = Service(store)
        await group.start("a", "b", "c", lease=1, seconds=1.5, calls=2, agent=AGENT)
        await group["a"].call("send", session="s", text="plan my week", id="p")
        holder = await _holder(group, "p")
        await group.others(holder)[0].call("steer", session="s", text="skip friday", id="k")
        await until(lambda: _asked(group, "p", 2), "the step that took the steer")
        group[holder].kill()  # in the second tool call, after the take was stored
        done = await view.wait("s", "p", seconds=30)
        stored = await _transcript(view, "s")
        requests = group.requests("p")
    assert done is not None and done.state == "completed"
    assert done.text == "answered: plan my week | skip friday"
    later = [r for r in requests if r["replica"] != holder]
    assert later and all(_ids(r).count("k") == 1 and _ids(r).index("k") == 3 for r in later)
    assert [m.id for m in stored].count("k") == 1 and [m.id for m in stored].count("p") == 1
    assert valid(from_stored(stored))
