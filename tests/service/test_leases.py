"""A replica's leases at scale: every lease it holds renewed in one call per interval, and a
stale lease among them stopping its own turn only (issue 24, "Leases at scale").

Turns wait on a tool held by a gate the test opens, over a memory store that records the
renewal calls it gets.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

import pytest

from steerable.service import Service, _replica
from steerable.service.agent import ReActAgent
from steerable.service.demo import DemoModel
from steerable.service_store import Lease, Renewal
from steerable.spec import Spec
from steerable.stores.memory import MemoryStore
from steerable.tools import Tool, tool

TURNS = 20


class _Recorded(MemoryStore):
    """A memory store that keeps the leases of each ``renew_many`` call, and counts ``renew``."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[Lease]] = []
        self.single = 0

    async def renew(self, lease: Lease, *, seconds: float) -> Renewal:
        self.single += 1
        return await super().renew(lease, seconds=seconds)

    async def renew_many(self, leases: Sequence[Lease], *, seconds: float) -> list[Renewal | None]:
        self.batches.append(list(leases))
        return await super().renew_many(leases, seconds=seconds)


def _gated(gate: asyncio.Event, waiting: list[int]) -> ReActAgent:
    """One ``work`` call a turn, which waits for ``gate`` (``waiting`` counts those under way)."""

    async def work(step: int) -> str:
        """Wait for the test."""
        waiting.append(step)
        await gate.wait()
        return f"step {step} done"

    worker: Tool = tool(name="work")(work)
    return ReActAgent(Spec(tools=[worker], max_steps=5), DemoModel(calls=1))


async def _until(check: Callable[[], Awaitable[bool] | bool], what: str) -> None:
    for _ in range(4000):
        done = check()
        if done if isinstance(done, bool) else await done:
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"never: {what}")


@pytest.mark.parametrize(("batch", "sizes"), [(500, [TURNS]), (8, [8, 8, 4])])
async def test_a_replica_renews_every_lease_it_holds_in_one_call_per_batch(
    monkeypatch: pytest.MonkeyPatch, batch: int, sizes: list[int]
) -> None:
    """20 turns waiting on a tool: each interval renews all 20 leases in one call (in calls
    of at most ``RENEW_BATCH``), never one call per turn."""
    monkeypatch.setattr(_replica, "RENEW_BATCH", batch)
    store, gate, waiting = _Recorded(), asyncio.Event(), list[int]()
    agent = _gated(gate, waiting)
    service = Service(store, agent, lease=3.0, renew_every=0.05, poll=0.05, concurrency=TURNS)
    async with service.serving() as replica:
        sent = [await service.send(f"s{n:02}", "go") for n in range(TURNS)]
        await _until(lambda: len(waiting) == TURNS, "every turn's tool under way")
        mark = len(store.batches)
        await _until(lambda: len(store.batches) >= mark + 3 * len(sizes), "three intervals")
        calls = store.batches[mark:]
        start = next(n for n, leases in enumerate(calls) if len(leases) == sizes[0])
        rounds = calls[start : start + len(sizes)]
        assert [len(leases) for leases in rounds] == sizes
        held = sorted(lease.session for leases in rounds for lease in leases)
        assert held == sorted(replica.counters.running) == [f"s{n:02}" for n in range(TURNS)]
        assert store.single == 0, "no lease renewed on its own"
        gate.set()
        done = [await service.wait(f"s{n:02}", s.id, seconds=10) for n, s in enumerate(sent)]
    assert all(d is not None and d.state == "completed" for d in done)


async def test_a_stale_lease_among_many_stops_its_own_turn_only() -> None:
    """Another holder takes one session over: the next renewal finds that lease stale and
    its turn stops, fenced; the other turns renew on and complete."""
    store, gate, waiting = _Recorded(), asyncio.Event(), list[int]()
    agent = _gated(gate, waiting)
    service = Service(store, agent, lease=3.0, renew_every=0.05, poll=0.05, concurrency=TURNS)
    async with service.serving() as replica:
        sent = [await service.send(f"s{n:02}", "go") for n in range(6)]
        await _until(lambda: len(waiting) == 6, "every turn's tool under way")
        status = await store.status("s03")
        assert status.turn is not None and status.turn.holder and status.turn.epoch
        lease = Lease("s03", status.turn.holder, status.turn.epoch, 0.0)
        # released and claimed with no await between (the memory store never suspends), so
        # no renewal comes in between: the replica's lease is stale from here
        await store.renew(lease, seconds=0)
        taken = await store.claim("intruder", seconds=60, cap=16, session="s03")
        assert taken is not None and taken.lease.epoch == lease.epoch + 1
        await _until(lambda: replica.counters.fenced == 1, "the stale lease's turn fenced")
        assert sorted(replica.counters.running) == ["s00", "s01", "s02", "s04", "s05"]
        gate.set()
        others = [n for n in range(6) if n != 3]
        done = [await service.wait(f"s{n:02}", sent[n].id, seconds=10) for n in others]
    assert all(d is not None and d.state == "completed" for d in done)
    assert replica.counters.fenced == 1 and replica.counters.ended == 5
    view = await store.turn("s03", sent[3].id)
    assert view is not None and (view.state, view.holder) == ("running", "intruder")
