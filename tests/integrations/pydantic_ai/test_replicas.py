"""PydanticAIAgent served by replica processes on Postgres (the replica script's ``--agent``,
the agent of ``replica_agent``): a steer through another replica is taken at the holder's next
step; the holder SIGKILLed mid-tool, another carries the turn on from the stored transcript."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from steerable import transcript_problems
from steerable.integrations.pydantic_ai import history
from steerable.session import Session
from steerable.stores.url import open_url
from tests.integrations.pydantic_ai.support import problems, view
from tests.service.replicas import Replicas, until

pytestmark = pytest.mark.slow

AGENT = "tests.integrations.pydantic_ai.replica_agent:weather_agent"


def _asked(group: Replicas) -> list[tuple[str, list[str]]]:
    return [(r["replica"], r["view"]) for r in group.requests()]


async def _count(group: Replicas, n: int) -> bool:
    return len(_asked(group)) >= n


async def _ended(replica: Any, turn: str) -> bool:
    found = await replica.call("turn", session="s", id=turn)
    return found is not None and found["state"] in ("completed", "failed", "stopped", "max_steps")


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
        turn = await other.call("turn", session="s", id="p")
        asked = _asked(group)
        async with open_url(postgres_url) as store:
            stored = await Session("s", store).messages()
    assert accepted["turn"] == "p"
    assert (turn["state"], turn["text"]) == ("completed", "answered: plan my week | skip friday")
    # one replica ran the turn; its next request after the call had the steer, once, in place
    assert [replica for replica, _ in asked] == [server] * 2
    assert asked[1][1] == ["user:plan my week", "call:call-1", "return:call-1", "user:skip friday"]
    assert [(m.id, m.steered) for m in stored if m.text and m.role == "user"] == [
        ("p", False),
        ("k", True),
    ]
    assert transcript_problems(stored) == []


async def test_the_holder_killed_in_its_second_call_is_carried_on_with_the_steer_once_in_place(
    postgres_url: str, tmp_path: Path
) -> None:
    async with Replicas(postgres_url, tmp_path) as group:
        a, *_ = await group.start("a", "b", "c", agent=AGENT, lease=1.0, seconds=1.5, calls=2)
        await a.call("send", session="s", text="plan my week", id="p")
        await until(lambda: _count(group, 1), "the first request")
        holder = group[group.requests()[0]["replica"]]
        other = group.others(holder.name)[0]
        await other.call("steer", session="s", text="skip friday", id="k")
        # the holder's second request: the step that took the steer is stored by then
        await until(lambda: _count(group, 2), "the step that took the steer")
        holder.kill()  # in the second tool call (it sleeps 1.5 s)
        await until(lambda: _ended(other, "p"), "the turn ended", seconds=60)
        turn = await other.call("turn", session="s", id="p")
        steer = await other.call("input", session="s", id="k")
        records = group.requests()
        async with open_url(postgres_url) as store:
            stored = await Session("s", store).messages()
    before = ["user:plan my week", "call:call-1", "return:call-1", "user:skip friday"]
    assert [r["view"] for r in records[:2]] == [["user:plan my week"], before]
    assert {r["replica"] for r in records[:2]} == {holder.name}
    later = records[2:]
    # another replica carried it on (resumed), from the stored transcript: the steer once,
    # right after the return it followed, in every request it sent; each history valid
    assert later and all(r["replica"] != holder.name and r["resumed"] for r in later)
    assert [r["view"][:4] for r in later] == [before] * len(later)
    assert all(r["view"].count("user:skip friday") == 1 for r in later)
    assert all(r["problems"] == [] for r in records)
    assert later[0]["view"] == before  # the killed call is not in it: it is called again
    assert (turn["state"], turn["text"]) == ("completed", "answered: plan my week | skip friday")
    assert turn["steers_taken"] == 1  # never taken again
    assert (steer["state"], steer["turn"]) == ("taken", "p")
    ids = [m.id for m in stored]
    assert ids.count("p") == 1 and ids.count("k") == 1
    assert [m.id for m in stored if m.steered] == ["k"]
    assert transcript_problems(stored) == []
    # what the store gives back (before Pydantic AI's own repair of a history): valid, in place
    rebuilt = history(stored)
    assert problems(rebuilt) == []
    assert view(rebuilt) == [*records[-1]["view"], "say:" + turn["text"]]
