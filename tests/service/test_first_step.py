"""A new turn's first step made with its claim (``claim(first=True)``).

The replica asks for it where the agent says its first save is the prompt's
(``saves_prompt_first``: steerable's own loop) and the store's claim takes ``first``; the
agent's first save is then answered from the claim with no store call. A first call that is
anything else (here: a repair of orphaned tool calls) is carried on from the stored
transcript, so the claim's step is neither stored twice nor lost. Over the memory store.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from steerable.messages import Message, ToolCall, user
from steerable.models.base import ModelRequest
from steerable.service import Service
from steerable.service.agent import Turn
from steerable.service.demo import demo_agent
from steerable.service_store import Claim, Known, Outcome
from steerable.stores.memory import MemoryStore
from tests.service.test_store_calls import Counted


class _Counted(Counted):
    """Counts the claims asked for a first step (``firsts``), those that made one, and the
    steps."""

    def __init__(self) -> None:
        super().__init__()
        self.made = 0

    async def claim(
        self,
        holder: str,
        *,
        seconds: float,
        cap: int,
        session: str | None = None,
        known: Mapping[str, Known] | None = None,
        first: bool = False,
    ) -> Claim | None:
        claim = await super().claim(
            holder, seconds=seconds, cap=cap, session=session, known=known, first=first
        )
        self.made += claim is not None and claim.taken is not None
        return claim


class _Waits:
    """An observer keeping what the ``steers_taken`` calls said."""

    def __init__(self) -> None:
        self.taken: list[tuple[str, int]] = []

    def claimed(self, claim: Claim) -> None:
        pass

    def steers_taken(self, session: str, turn: str, waits: Sequence[float]) -> None:
        self.taken.append((turn, len(waits)))

    def fenced(self, session: str) -> None:
        pass

    def turn_ended(self, report: Any) -> None:
        pass


async def test_a_steer_waiting_for_a_turn_is_taken_by_its_claim_and_seen_at_once() -> None:
    store, waits = _Counted(), _Waits()
    requests: list[ModelRequest] = []
    service = Service(
        store,
        demo_agent(seconds=0.01, calls=1, record=requests.append),
        poll=30.0,
        observers=[waits],
    )
    sent = await service.send("s", "go")
    steered = await service.steer("s", "in Celsius")
    assert steered.turn == sent.id, "offered to the turn before it began"
    async with service.serving():
        done = await service.wait("s", sent.id, seconds=20)
    assert done is not None and done.state == "completed"
    assert store.firsts >= 1 and store.made == 1
    assert store.steps == 1, "the claim made the prompt's step: only the tool's is a step call"
    first = [m.text for m in requests[0].messages]
    assert first == ["go", "in Celsius"], "the model's first request saw the steer"
    messages = await store.messages("s")
    assert [m.id for m in messages][:2] == [sent.id, steered.id]
    assert [m.id for m in messages].count(steered.id) == 1
    view = await store.turn("s", sent.id)
    assert view is not None and (view.steps, view.steers_taken) == (2, 1)
    taken = await store.input("s", steered.id)
    assert taken is not None and (taken.state, taken.step) == ("taken", 1)
    assert waits.taken == [(sent.id, 1)], "the observers were told of the claim's take"


class _Plain:
    """The demo agent, without saying its first save is the prompt's."""

    def __init__(self) -> None:
        self.inner = demo_agent(seconds=0.01, calls=1)

    @property
    def steers_per_turn(self) -> int:
        return self.inner.steers_per_turn

    async def run_turn(self, turn: Turn) -> Outcome:
        return await self.inner.run_turn(turn)


async def test_an_agent_that_does_not_say_so_gets_no_first_step_with_its_claim() -> None:
    store = _Counted()
    service = Service(store, _Plain(), poll=30.0)
    async with service.serving():
        sent = await service.send("s", "go")
        done = await service.wait("s", sent.id, seconds=20)
    assert done is not None and done.state == "completed"
    assert (store.firsts, store.made, store.steps) == (0, 0, 2)


class _OldClaim(MemoryStore):
    """A store whose claim predates ``first``."""

    async def claim(  # type: ignore[override]
        self,
        holder: str,
        *,
        seconds: float,
        cap: int,
        session: str | None = None,
        known: Mapping[str, Known] | None = None,
    ) -> Claim | None:
        return await super().claim(holder, seconds=seconds, cap=cap, session=session, known=known)


async def test_a_store_whose_claim_takes_no_first_is_served_as_before() -> None:
    store = _OldClaim()
    service = Service(store, demo_agent(seconds=0.01, calls=1), poll=30.0)  # type: ignore[arg-type]
    async with service.serving():
        sent = await service.send("s", "go")
        await service.steer("s", "and this")
        done = await service.wait("s", sent.id, seconds=20)
    assert done is not None and done.state == "completed"
    texts = [m.text for m in await store.messages("s")]
    assert texts[:2] == ["go", "and this"]


async def test_a_first_call_that_is_not_the_claim_s_step_carries_the_turn_on() -> None:
    """Orphaned tool calls before the turn: the loop's first call is their repair, not the
    prompt's save; the turn is carried on from the stored transcript (the prompt and the
    steer the claim stored), each stored once, the steer answered once."""
    store = _Counted()
    orphan = Message("assistant", (ToolCall("c1", "work", "{}"),))
    await store.save("s", [user("earlier"), orphan], at=0)
    requests: list[ModelRequest] = []
    service = Service(store, demo_agent(seconds=0.01, calls=1, record=requests.append), poll=30.0)
    sent = await service.send("s", "go")
    steered = await service.steer("s", "and this")
    async with service.serving() as replica:
        done = await service.wait("s", sent.id, seconds=20)
    assert done is not None and done.state == "completed", done
    assert store.made == 1 and replica.counters.claims == 1
    assert (replica.counters.behind, replica.counters.store_errors) == (1, 0)
    messages = await store.messages("s")
    ids = [m.id for m in messages]
    assert ids.count(sent.id) == 1 and ids.count(steered.id) == 1
    assert ids[:2] == [messages[0].id, orphan.id]
    assert messages[2].role == "user" and messages[2].tool_results, "the orphan's result"
    assert ids.index(sent.id) < ids.index(steered.id)
    seen = [m.text for m in requests[0].messages]
    assert "go" in seen and "and this" in seen, "the first request saw the prompt and steer"
    view = await store.turn("s", sent.id)
    assert view is not None and view.steers_taken == 1
    assert (await store.input("s", steered.id)) is not None
    last = messages[-1]
    assert last.role == "assistant" and last.text == done.text


async def test_a_first_save_unlike_the_claim_s_step_stores_nothing_and_says_so() -> None:
    """Other messages, another position, a ``final`` save or a smaller take than the claim
    took: :class:`Ahead`, with no store call (the claim's step stands as stored); the same
    save is answered from the claim, once."""
    import pytest

    from steerable.service._fenced import Ahead, FencedStore, First, LeaseCell
    from steerable.service_store import Input

    async def view(store: MemoryStore, steer: bool = True) -> tuple[FencedStore, LeaseCell, Claim]:
        await store.enqueue("s", Input("send", "go", "t"))
        if steer:
            await store.enqueue("s", Input("steer", "also", "x"))
        claim = await store.claim("r", seconds=60, cap=16, session="s", first=True)
        assert claim is not None and claim.taken is not None
        cell = LeaseCell(claim.lease)
        prompt = claim.prompt.message(steered=False)
        ahead = First(claim.start, prompt, claim.taken)
        return FencedStore(store, store, cell, [], ahead=ahead), cell, claim

    wrong: list[dict[str, Any]] = [
        {"messages": [user("other")], "at": 0, "take": 16},
        {"messages": "prompt", "at": 1, "take": 16},
        {"messages": "prompt", "at": 0, "take": 0},
        {"messages": "prompt", "at": 0, "take": 0, "final": True, "steer": False},
    ]
    for case in wrong:
        store = MemoryStore()
        steer = case.get("steer", True)
        fenced, cell, claim = await view(store, steer)
        messages = (
            [claim.prompt.message(steered=False)]
            if case["messages"] == "prompt"
            else case["messages"]
        )
        with pytest.raises(Ahead):
            await fenced.save(
                "s", messages, at=case["at"], take=case["take"], final=case.get("final", False)
            )
        assert cell.store_failed and cell.behind, case
        assert [m.id for m in await store.messages("s")] == ["t", "x"][: 1 + steer], case
        assert fenced.stored is not None and fenced.stored == [], "what it knew is still true"
    store = MemoryStore()
    fenced, cell, claim = await view(store)
    taken = await fenced.save("s", [claim.prompt.message(steered=False)], at=0, take=16)
    assert [m.id for m in taken] == ["x"] and not cell.store_failed
    assert fenced.stored is not None and [m.id for m in fenced.stored] == ["t", "x"]
    assert await fenced.save("s", [], at=2, take=16) == [], "the next save is the store's"
