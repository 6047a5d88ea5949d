"""A replica holds the transcripts it served, and its next claim of a session reads only what
is new: the turn still sees the whole stored transcript, whoever wrote in between.

Over a real SQLite file; the store's claims are recorded to see what each one left out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from steerable.messages import Message, assistant
from steerable.service import Service
from steerable.service._held import Held
from steerable.service.demo import demo_agent
from steerable.service_store import Claim, Known, Lease
from steerable.stores.memory import MemoryStore
from steerable.stores.sqlite import SQLiteStore


class Spy(SQLiteStore):
    """A SQLite store that keeps each claim it gave."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.claims: list[Claim] = []

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
        if claim is not None:
            self.claims.append(claim)
        return claim


class Requests:
    """The messages of each model request the demo agent made."""

    def __init__(self) -> None:
        self.seen: list[list[str]] = []

    def __call__(self, request: Any) -> None:
        self.seen.append([m.text or "<part>" for m in request.messages])


async def _turn(service: Service, text: str) -> None:
    sent = await service.send("s", text)
    done = await service.wait("s", sent.id, seconds=20)
    assert done is not None and done.state == "completed", done


async def _stored(store: SQLiteStore) -> list[str]:
    return [m.text or "<part>" for m in await store.messages("s")]


async def test_the_next_claim_of_a_served_session_reads_only_the_new_messages(
    tmp_path: Path,
) -> None:
    seen = Requests()
    async with Spy(tmp_path / "s.db") as store:
        service = Service(store, demo_agent(seconds=0.01, record=seen), poll=0.05)
        async with service.serving() as replica:
            for text in ("one", "two", "three"):
                await _turn(service, text)
                before = await _stored(store)
        assert [(c.known, len(c.messages)) for c in store.claims] == [(0, 0), (4, 0), (8, 0)]
        assert replica.counters.read_since == 2
        assert seen.seen[-2] == [*before[:8], "three"], "the turn saw the whole transcript"


async def test_a_cut_between_turns_is_seen_by_the_next_turn(tmp_path: Path) -> None:
    seen = Requests()
    async with Spy(tmp_path / "s.db") as store:
        service = Service(store, demo_agent(seconds=0.01, record=seen), poll=0.05)
        async with service.serving():
            await _turn(service, "one")
            await _turn(service, "two")
            await store.truncate("s", at=4)
            await store.save("s", [assistant("an aside")], at=4)
            await _turn(service, "three")
        assert store.claims[-1].known == 0, "the cut gave the transcript a new mark"
        assert seen.seen[-2] == ["one", "<part>", "<part>", "answered: one", "an aside", "three"]


async def test_turns_served_elsewhere_in_between_are_read_and_seen(tmp_path: Path) -> None:
    seen = Requests()
    async with Spy(tmp_path / "s.db") as a_store, SQLiteStore(tmp_path / "s.db") as b_store:
        a = Service(a_store, demo_agent(seconds=0.01, record=seen), poll=0.05, replica="a")
        b = Service(b_store, demo_agent(seconds=0.01, record=seen), poll=0.05, replica="b")
        async with a.serving():
            await _turn(a, "one")
        async with b.serving():
            await _turn(b, "two")
        async with a.serving():
            await _turn(a, "three")
        last = a_store.claims[-1]
        assert (last.known, len(last.messages)) == (4, 4), "a read only b's turn"
        whole = await _stored(a_store)
        assert seen.seen[-2] == [*whole[:8], "three"]


class _OldClaim(MemoryStore):
    """A store whose claim predates ``known``."""

    async def claim(  # type: ignore[override]
        self, holder: str, *, seconds: float, cap: int, session: str | None = None
    ) -> Claim | None:
        return await super().claim(holder, seconds=seconds, cap=cap, session=session)


async def test_a_store_whose_claim_takes_no_known_is_served_as_before() -> None:
    store = _OldClaim()
    service = Service(store, demo_agent(seconds=0.01), poll=0.05)  # type: ignore[arg-type]
    async with service.serving() as replica:
        for text in ("one", "two"):
            await _turn(service, text)
    assert replica.counters.read_since == 0
    assert len(await store.messages("s")) == 8


def _claim(session: str, mark: str, known: int, messages: list[Message]) -> Claim:
    lease = Lease(session, "r", 1, 0.0)
    from steerable.service_store import Input

    prompt = Input("send", "go")
    return Claim(lease, prompt.id, prompt, 0, messages, False, 0, 0, 16, False, None, mark, known)


def test_held_lets_the_least_recently_served_go_first_and_checks_the_mark() -> None:
    held = Held(5)
    three = [assistant(str(i)) for i in range(3)]
    held.keep("a", "m", three)
    held.keep("b", "m", three[:2])
    assert len(held) == 5 and set(held.known(None)) == {"a", "b"}
    held.keep("c", "m", three[:1])  # 6 > 5: a goes
    assert set(held.known(None)) == {"b", "c"} and len(held) == 3
    assert held.known("b") == {"b": Known(2, "m")} and held.known("a") == {}
    held.keep("big", "m", [assistant("x")] * 6)  # more than the limit: not held
    assert "big" not in held.known(None)
    more = [assistant("new")]
    whole = held.whole(_claim("b", "m", 2, more))
    assert whole is not None and whole.known == 0 and whole.messages == [*three[:2], *more]
    assert held.known("b") == {}, "a claimed session is its turn's now"
    held.keep("c", "m", three[:1])
    assert held.whole(_claim("c", "other", 1, [])) is None, "a mark it does not hold"
    untouched = _claim("d", "m", 0, more)
    assert held.whole(untouched) is untouched


async def test_a_steer_a_turn_took_is_held_in_its_place(tmp_path: Path) -> None:
    seen = Requests()
    async with Spy(tmp_path / "s.db") as store:
        service = Service(store, demo_agent(seconds=0.3, record=seen), poll=0.05)
        async with service.serving():
            first = await service.send("s", "one")
            for _ in range(400):
                if seen.seen:
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)  # the tool is running
            steer = await service.steer("s", "and this")
            assert steer.turn == first.id
            done = await service.wait("s", first.id, seconds=20)
            assert done is not None and done.state == "completed"
            await _turn(service, "two")
        stored = await _stored(store)
        assert "and this" in stored and store.claims[-1].known == len(stored) - 4
        assert seen.seen[-2] == [*stored[: len(stored) - 4], "two"]


class _Partial:
    """A store written before ``renew_many``: the service's verbs but that one."""

    def __init__(self) -> None:
        self._inner = MemoryStore()

    def __getattr__(self, name: str) -> Any:
        if name == "renew_many":
            raise AttributeError(name)
        return getattr(self._inner, name)


def test_a_store_lacking_a_verb_is_refused_naming_it() -> None:
    from steerable.errors import UsageError

    with pytest.raises(UsageError, match=r"it lacks renew_many\)"):
        Service(_Partial())
