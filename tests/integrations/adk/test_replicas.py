"""ADKAgent in replica processes: SIGKILL after the step that took a steer, three replicas on
Postgres (``scripts/service_replica.py --agent``, the agent of ``replica_agent``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from steerable.session import Session
from steerable.stores.url import open_url
from tests.integrations.adk.scripted import problems, recorded, texts_of
from tests.service.replicas import Replicas, until

AGENT = "tests.integrations.adk.replica_agent:weather_agent"


def _asked(group: Replicas) -> list[tuple[str, list[str]]]:
    return [(replica, texts_of(contents)) for replica, contents in recorded(group.requests_file)]


async def _ended(replica: Any, turn: str) -> bool:
    view = await replica.call("turn", session="s", id=turn)
    return view is not None and view["state"] in ("completed", "failed", "stopped")


async def test_sigkill_after_the_step_that_took_a_steer_retries_with_it_once(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'service.db'}"
    async with Replicas(url, tmp_path) as group:
        (a,) = await group.start("a", agent=AGENT, lease=1.0, seconds=1.0, model_delay=60)
        await a.call("send", session="s", text="plan my week", id="p")
        await until(lambda: _count(group, 1), "the first request")
        await a.call("steer", session="s", text="skip friday", id="k")
        # the request after the take: its step (the result and the steer) is stored by now
        await until(lambda: _last_is(group, "skip friday"), "the request with the steer")
        held = await a.counters()  # a 1 s lease held through a's first ADK run
        a.kill()
        (b,) = await group.start("b", agent=AGENT, lease=1.0, seconds=0.0, model_delay=0)
        await until(lambda: _ended(b, "p"), "the turn carried on and ended", seconds=60)
        view = await b.call("turn", session="s", id="p")
        fate = await b.call("input", session="s", id="k")
        asked = _asked(group)
        async with open_url(url) as store:
            stored = await Session("s", store).messages()
    assert (held["claims"], held["resumed"], held["fenced"]) == (1, 0, 0)
    assert (view["state"], view["text"]) == ("completed", "answered: plan my week | skip friday")
    assert (fate["state"], fate["turn"]) == ("taken", "p")
    first, taken, *retried = asked
    assert first == ("a", ["plan my week"])
    assert taken == ("a", ["plan my week", "call:call-1", "result:call-1", "skip friday"])
    # b carries the turn on from the stored step: the steer once, in place, never taken again
    assert retried and all(replica == "b" for replica, _ in retried)
    assert retried[0][1] == taken[1]
    assert all(words.count("skip friday") == 1 for _, words in retried)
    assert all(problems(contents) == [] for _, contents in recorded(group.requests_file))
    assert [(m.id, m.steered) for m in stored if m.text] == [("p", False), ("k", True)]


async def _count(group: Replicas, n: int) -> bool:
    return len(recorded(group.requests_file)) >= n


async def _last_is(group: Replicas, text: str) -> bool:
    asked = _asked(group)
    return bool(asked) and asked[-1][1][-1:] == [text]


async def test_three_replicas_on_postgres_a_steer_through_another_is_taken_at_the_next_step(
    postgres_url: str, tmp_path: Path
) -> None:
    async with Replicas(postgres_url, tmp_path) as group:
        a, b, c = await group.start("a", "b", "c", agent=AGENT, lease=1.0, seconds=1.5)
        await a.call("send", session="s", text="plan my week", id="p")
        await until(lambda: _count(group, 1), "the first request")
        (server,) = [r for r, _ in _asked(group)]
        other = next(r for r in (a, b, c) if r.name != server)
        accepted = await other.call("steer", session="s", text="skip friday", id="k")
        await until(lambda: _ended(other, "p"), "the turn ended", seconds=60)
        view = await other.call("turn", session="s", id="p")
        asked = _asked(group)
        counters = await group.counters()
    assert accepted["turn"] == "p"
    # one claim, never fenced: the holder kept its 1 s lease through its first ADK run
    assert sum(c["claims"] for c in counters.values()) == 1
    assert all(c["fenced"] == 0 for c in counters.values())
    assert view["text"] == "answered: plan my week | skip friday"
    assert [replica for replica, _ in asked] == [server] * 3
    assert asked[1][1] == ["plan my week", "call:call-1", "result:call-1", "skip friday"]
    assert asked[2][1][:4] == asked[1][1]
