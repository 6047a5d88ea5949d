"""A replica's store calls: none spent on a claim it can tell will find nothing (after
claiming a session a hint named it waits for the next hint, a hint its own later claim
answered is passed over, a turn's end wakes the claims only when they waited for room), a
turn's first step made with its claim, and its answer saved with its end, in one call.

Over the memory store, which notifies; its calls are counted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from steerable.errors import StoreUnavailable, TranscriptConflict
from steerable.messages import Message, assistant, user
from steerable.service import Service
from steerable.service.demo import demo_agent
from steerable.service_store import Claim, Known, Lease, Outcome
from steerable.stores.memory import MemoryStore


class Counted(MemoryStore):
    """A memory store that counts the claims that found a turn and those that did not, and
    the steps and ends."""

    def __init__(self) -> None:
        super().__init__()
        self.found = 0
        self.none = 0
        self.firsts = 0  # claims asked to make the turn's first step
        self.steps = 0
        self.ends: list[int] = []  # each end's count of last messages

    async def step(
        self,
        lease: Lease,
        messages: Sequence[Message],
        *,
        at: int,
        take: int,
        final: bool = False,
    ) -> list[Message]:
        self.steps += 1
        return await super().step(lease, messages, at=at, take=take, final=final)

    async def end_turn(
        self,
        lease: Lease,
        outcome: Outcome,
        *,
        last: Sequence[Message] = (),
        at: int | None = None,
    ) -> str | None:
        self.ends.append(len(last))
        return await super().end_turn(lease, outcome, last=last, at=at)

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
        self.firsts += first
        claim = await super().claim(
            holder, seconds=seconds, cap=cap, session=session, known=known, first=first
        )
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


async def test_a_turn_s_answer_is_saved_with_its_end() -> None:
    store = Counted()
    service = Service(store, demo_agent(seconds=0.01, calls=1), poll=30.0)
    async with service.serving():
        sent = await service.send("s", "go")
        done = await service.wait("s", sent.id, seconds=20)
    assert done is not None and done.state == "completed" and done.text == "answered: go"
    assert store.firsts >= 1, "the claim made the prompt's step"
    assert (store.steps, store.ends) == (1, [1]), "then the tool's step, then the end"
    messages = await store.messages("s")
    assert [m.role for m in messages][-1] == "assistant" and messages[-1].text == done.text
    kinds = [e.kind for e in await store.events("s", after=0, limit=100)]
    assert kinds[-2:] == ["message", "turn_ended"]
    view = await store.turn("s", sent.id)
    assert view is not None and (view.steps, view.end) == (2, len(messages))


class _NoLast(Counted):
    """A store whose end_turn predates ``last``."""

    async def end_turn(self, lease: Lease, outcome: Outcome) -> str | None:  # type: ignore[override]
        self.ends.append(0)
        return await MemoryStore.end_turn(self, lease, outcome)


async def test_a_store_whose_end_takes_no_last_save_gets_the_answer_as_a_step() -> None:
    store = _NoLast()
    service = Service(store, demo_agent(seconds=0.01, calls=1), poll=30.0)  # type: ignore[arg-type]
    async with service.serving():
        sent = await service.send("s", "go")
        done = await service.wait("s", sent.id, seconds=20)
    assert done is not None and done.state == "completed"
    assert (store.steps, store.ends) == (2, [0])
    assert (await store.messages("s"))[-1].text == "answered: go"


class _Refused(Counted):
    """A store that refuses an end's last save as a conflict (the transcript moved)."""

    async def end_turn(
        self,
        lease: Lease,
        outcome: Outcome,
        *,
        last: Sequence[Message] = (),
        at: int | None = None,
    ) -> str | None:
        if last:
            self.ends.append(-1)
            raise TranscriptConflict(lease.session, at or 0, (at or 0) + 1)
        return await super().end_turn(lease, outcome)


class _Ends:
    """An observer keeping the state of each turn end it is told of."""

    def __init__(self) -> None:
        self.states: list[str] = []

    def claimed(self, claim: Claim) -> None:
        pass

    def steers_taken(self, session: str, turn: str, waits: Sequence[float]) -> None:
        pass

    def fenced(self, session: str) -> None:
        pass

    def turn_ended(self, report: Any) -> None:
        self.states.append(report.state)


async def test_an_end_whose_last_save_is_refused_ends_the_turn_failed_without_it() -> None:
    store, ends = _Refused(), _Ends()
    service = Service(store, demo_agent(seconds=0.01, calls=1), poll=30.0, observers=[ends])
    async with service.serving():
        sent = await service.send("s", "go")
        done = await service.wait("s", sent.id, seconds=20)
    assert done is not None and done.state == "failed"
    assert ends.states == ["failed"], "the observers are told the end as it was recorded"
    assert store.ends == [-1, 0]
    assert "answered: go" not in [m.text for m in await store.messages("s")]


async def test_a_kept_last_save_is_stored_before_any_other_call_of_the_turn() -> None:
    from steerable.messages import assistant
    from steerable.service._fenced import FencedStore, LeaseCell
    from steerable.service_store import Input
    from steerable.store import Steer

    store = MemoryStore()
    await store.enqueue("s", Input("send", "go", "t"))
    claim = await store.claim("r", seconds=60, cap=16, session="s")
    assert claim is not None
    view = FencedStore(store, store, LeaseCell(claim.lease), [], defer_last=True)
    await view.save("s", [claim.prompt.message(steered=False)], at=0, take=16)
    answer = assistant("done")
    assert await view.save("s", [answer], at=1) == []
    assert [m.id for m in await store.messages("s")] == ["t"], "kept for the end"
    await view.steer("s", Steer("left over", "x"))  # another call: the kept save goes first
    assert [m.id for m in await store.messages("s")] == ["t", answer.id]
    kinds = [(e.kind, e.data.get("id")) for e in await store.events("s", after=0, limit=100)]
    assert kinds[-2:] == [("message", answer.id), ("input", "x")]
    assert view.take_pending() is None


class _KeywordsAnyhow(Counted):
    """A store whose end_turn takes ``**kwargs`` and drops what it does not know."""

    async def end_turn(self, lease: Lease, outcome: Outcome, **ignored: Any) -> str | None:
        self.ends.append(0)
        return await MemoryStore.end_turn(self, lease, outcome)


async def test_a_store_whose_end_takes_any_keyword_is_not_given_the_answer_to_drop() -> None:
    store = _KeywordsAnyhow()
    service = Service(store, demo_agent(seconds=0.01, calls=1), poll=30.0)
    async with service.serving():
        sent = await service.send("s", "go")
        done = await service.wait("s", sent.id, seconds=20)
    assert done is not None and done.state == "completed"
    assert (await store.messages("s"))[-1].text == "answered: go", "the answer was stored"
    assert store.steps == 2


class _ReadFails(MemoryStore):
    """A memory store whose first claim leaves out a message the replica does not hold, and
    whose first transcript read (the replica's, to fill it in) fails."""

    def __init__(self) -> None:
        super().__init__()
        self.lied = self.failed = False

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
        claim = await super().claim(holder, seconds=seconds, cap=cap, session=session)
        if claim is None or self.lied:
            return claim
        self.lied = True
        return dataclasses.replace(claim, messages=claim.messages[1:], known=1)

    async def messages(self, session: str) -> list[Message]:
        if not self.failed:
            self.failed = True
            raise StoreUnavailable("the read did not arrive")
        return await super().messages(session)


async def test_a_claim_whose_transcript_cannot_be_read_lets_its_lease_go() -> None:
    store = _ReadFails()
    await store.save("s", [user("before"), assistant("then")], at=0)
    service = Service(store, demo_agent(seconds=0.01, calls=1), poll=0.05, lease=60.0)
    async with service.serving():
        sent = await service.send("s", "go")
        done = await service.wait("s", sent.id, seconds=10)
    assert store.lied and store.failed
    assert done is not None and done.state == "completed", "claimed again at once, not in 60 s"
    assert [m.text for m in await store.messages("s")][:3] == ["before", "then", "go"]
