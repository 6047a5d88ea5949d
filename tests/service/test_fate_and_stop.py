"""A steer's fate told (taken at a step, or freed to be a turn of its own when the turn was
writing its answer), and a stop that reaches the holder well before the lease's renewal
on a store without notifications (the stop poll)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from steerable.service import Service
from steerable.service.demo import demo_agent
from steerable.stores.memory import MemoryStore
from steerable.stores.sqlite import SQLiteStore


async def _running(service: Service, sid: str, *, steps: int = 1) -> None:
    for _ in range(2000):
        status = await service.status(sid)
        if status.turn is not None and status.turn.steps >= steps:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the turn never ran")


async def test_a_steer_sent_while_the_answer_is_written_becomes_its_own_turn() -> None:
    """The final answer's request takes a second: a steer sent then is offered to the turn,
    which ends without another step; the end frees it, the events say so, and it runs."""
    store = MemoryStore()
    service = Service(store, demo_agent(calls=0, delay=1.0), poll=0.05)
    async with service.serving():
        await service.send("s", "plan", id="p")
        await _running(service, "s")
        accepted = await service.steer("s", "and one more thing", id="late")
        assert accepted.turn == "p"
        fate = await service.fate("s", "late", seconds=20)
        assert fate is not None and fate.state in ("waiting", "prompt")
        assert fate.state == "prompt" or fate.turn is None
        ended = await service.wait("s", "late", seconds=20)
        assert ended is not None and ended.state == "completed"
    first = await service.turn("s", "p")
    assert first is not None and first.state == "completed" and first.steers_taken == 0
    events = await service.events("s", limit=1000)
    releases = [e.data["released"] for e in events if e.kind == "turn_ended" and e.turn == "p"]
    assert releases == [["late"]]
    view = await service.input("s", "late")
    assert view is not None and (view.state, view.turn) == ("prompt", "late")


async def test_a_steer_sent_before_the_claim_is_taken_at_the_first_step(tmp_path: Path) -> None:
    """On SQLite (no notifications: the claim waits for the poll) a steer sent right after
    the send joins that turn, which takes it at its first step."""
    async with SQLiteStore(tmp_path / "s.db") as store:
        service = Service(store, demo_agent(seconds=0.1), poll=1.0)
        async with service.serving():
            await asyncio.sleep(0.1)  # the replica is idle, polling
            sent = await service.send("s", "plan", id="p")
            steered = await service.steer("s", "skip friday", id="st")
            assert (sent.ahead, steered.turn) == (0, "p")
            ended = await service.wait("s", "p", seconds=30)
            assert ended is not None and ended.state == "completed"
        view = await service.input("s", "st")
        assert view is not None and (view.state, view.turn, view.step) == ("taken", "p", 1)
        assert "skip friday" in ended.text


async def test_a_stop_reaches_the_holder_before_the_renewal(tmp_path: Path) -> None:
    """The lease renews every 50 s; the stop poll still ends the turn within seconds."""
    async with SQLiteStore(tmp_path / "s.db") as store:
        service = Service(
            store,
            demo_agent(seconds=60.0),
            lease=60.0,
            renew_every=50.0,
            poll=0.05,
            stop_poll=0.1,
        )
        async with service.serving():
            await service.send("s", "a long job", id="p")
            await _running(service, "s")
            await asyncio.sleep(0.2)  # the tool is under way
            assert await service.stop("s") == "p"
            ended = await service.wait("s", "p", seconds=15)
            assert ended is not None and ended.state == "stopped"
