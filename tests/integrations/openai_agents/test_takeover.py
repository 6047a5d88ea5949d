"""A replica SIGKILLed while it holds an SDK turn: another carries the turn on.

Three replicas on Postgres serve ``support:gated_agent`` (a tool call returns only once the
test opens its gate, so the test knows which call the kill lands in). The turn's first step
after its first tool call takes a steer and stores it; the holder is killed during the
second tool call; the new holder rebuilds the run from the stored transcript.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from steerable.service import Service
from steerable.stores.url import open_url
from tests.integrations.openai_agents.support import item_problems, kinds, stored_items
from tests.service.replicas import Replicas, until

AGENT = "tests.integrations.openai_agents.support:gated_agent"


@pytest.fixture
async def view(postgres_url: str) -> AsyncIterator[Service]:
    """The test's own front door on the store (no agent: it serves nothing)."""
    async with open_url(postgres_url + "?pool=2") as store:
        yield Service(store)


@pytest.mark.slow
async def test_a_holder_killed_after_a_stored_steer_is_carried_on_with_the_steer_once(
    postgres_url: str, tmp_path: Path, view: Service
) -> None:
    async with Replicas(postgres_url, tmp_path) as group:
        a, _, _ = await group.start("a", "b", "c", lease=1.5, calls=2, agent=AGENT)
        await a.call("send", session="s", text="plan my week", id="p")
        await until(lambda: _asked(group, 1), "the turn's first request")
        holder = group[group.requests()[0]["replica"]]
        steerer = group.others(holder.name)[0]
        assert (await steerer.call("steer", session="s", text="skip fri", id="k"))["turn"] == "p"
        (tmp_path / "gate-0").touch()  # the first tool call returns: the next step takes k
        await until(lambda: _asked(group, 2), "the step after the first tool call")
        taken = group.requests()[1]
        assert taken["replica"] == holder.name
        assert kinds(taken["items"])[-2:] == ["function_call_output", "user:skip fri"]
        holder.kill()  # inside the second tool call (its gate is shut)
        await holder.process.wait()
        (tmp_path / "gate-1").touch()
        done = await view.wait("s", "p", seconds=30)
        counters = await group.counters()
        carried = group.requests()[2:]
    assert done is not None and (done.state, done.text) == (
        "completed",
        "answered: plan my week | skip fri",
    )
    assert sum(c["resumed"] for c in counters.values()) == 1
    assert carried and holder.name not in {r["replica"] for r in carried}
    # the new holder's first request: the stored transcript, the steer once, in place
    assert kinds(carried[0]["items"]) == [
        "user:plan my week",
        "function_call",
        "function_call_output",
        "user:skip fri",
    ]
    for request in carried:  # never taken again, and a list the provider accepts
        assert kinds(request["items"]).count("user:skip fri") == 1
        assert item_problems(request["items"]) == []
    assert done.steers_taken == 1
    fate = await view.input("s", "k")
    assert fate is not None and (fate.state, fate.turn) == ("taken", "p")
    stored = [e.message for e in await view.transcript("s", limit=1000)]
    ids = [m.id for m in stored]
    assert ids.count("p") == 1 and ids.count("k") == 1
    assert next(m for m in stored if m.id == "k").steered
    items = stored_items(stored)
    assert kinds(items) == [*kinds(carried[-1]["items"]), "message"]  # as the last request had it
    assert item_problems(items) == []


async def _asked(group: Replicas, count: int) -> bool:
    return len(group.requests()) >= count
