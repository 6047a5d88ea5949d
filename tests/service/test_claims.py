"""A replica spends no store call on a claim it can tell will find nothing: after claiming a
session a hint named it waits for the next hint, a hint its own later claim answered is passed
over, and a turn's end wakes the claims only when they waited for room.

Over the memory store, which notifies; its claims are counted.
"""

from __future__ import annotations

from collections.abc import Mapping

from steerable.service import Service
from steerable.service.demo import demo_agent
from steerable.service_store import Claim, Known
from steerable.stores.memory import MemoryStore


class Counted(MemoryStore):
    """A memory store that counts the claims that found a turn and those that did not."""

    def __init__(self) -> None:
        super().__init__()
        self.found = 0
        self.none = 0

    async def claim(
        self,
        holder: str,
        *,
        seconds: float,
        cap: int,
        session: str | None = None,
        known: Mapping[str, Known] | None = None,
    ) -> Claim | None:
        claim = await super().claim(holder, seconds=seconds, cap=cap, session=session, known=known)
        if claim is None:
            self.none += 1
        else:
            self.found += 1
        return claim


async def test_turns_one_after_another_make_no_empty_claims() -> None:
    store = Counted()
    service = Service(store, demo_agent(seconds=0.01), poll=30.0)  # no poll in the test
    async with service.serving():
        for i in range(5):
            sent = await service.send("s", f"turn {i}")
            done = await service.wait("s", sent.id, seconds=20)
            assert done is not None and done.state == "completed"
    assert store.found == 5
    assert store.none <= 1, f"{store.none} claims found nothing (one: the look at start)"


async def test_inputs_queued_behind_a_turn_are_claimed_once_each() -> None:
    store = Counted()
    service = Service(store, demo_agent(seconds=0.05), poll=30.0)
    async with service.serving():
        sent = [await service.send("s", f"turn {i}") for i in range(4)]
        for input in sent:
            done = await service.wait("s", input.id, seconds=20)
            assert done is not None and done.state == "completed"
    assert store.found == 4
    assert store.none <= 2, f"{store.none} claims found nothing (one: the look at start)"
