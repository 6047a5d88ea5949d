"""The cases of the service store contract: each a coroutine, each its own pytest test.

They run on a store that implements both :class:`steerable.Store` and
:class:`steerable.service_store.ServiceStore` (the ``store`` fixture of
:class:`~steerable.testing.ServiceContract`). Every case uses fresh session ids; a case
that claims without naming a session tolerates the sessions other cases left behind in a
shared database. Leases that must expire last a fraction of a second.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from contextlib import AsyncExitStack
from typing import Any, Protocol

import pytest

from steerable.errors import Fenced, TranscriptConflict
from steerable.messages import Message, Text, assistant, new_id, user
from steerable.service_store import Claim, Input, Outcome, ServiceStore
from steerable.store import Store
from steerable.testing.abilities import OpenStore, needs

SERVICE_CASES: list[Callable[..., Coroutine[Any, Any, None]]] = []
"""Every case, in the order they run."""

SHORT = 0.3  # a lease meant to expire
WAIT = 0.8  # long enough for SHORT to have expired on the database's clock
LONG = 60.0


class Both(Store, ServiceStore, Protocol):
    """A store with the service's tables."""


def _case(case: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., Any]:
    SERVICE_CASES.append(case)
    return case


def _sid() -> str:
    return f"service-{new_id()}"


def _send(text: str, id: str | None = None) -> Input:
    return Input("send", text, id or new_id())


def _steer(text: str, id: str | None = None) -> Input:
    return Input("steer", text, id or new_id())


async def _claimed(
    store: Both, sid: str, *, holder: str = "a", seconds: float = LONG, cap: int = 16
) -> Claim:
    claim = await store.claim(holder, seconds=seconds, cap=cap, session=sid)
    assert claim is not None, f"nothing to claim in {sid}"
    return claim


async def _first_step(store: Both, claim: Claim, take: int = 16) -> list[Message]:
    """The turn's first step: its prompt saved, steers taken."""
    prompt = claim.prompt.message(steered=False)
    return await store.step(claim.lease, [prompt], at=len(claim.messages), take=take)


def _ids(messages: list[Message]) -> list[str]:
    return [m.id for m in messages]


# -- inputs ---------------------------------------------------------------------------------


@_case
async def inputs_keep_their_order_of_arrival(store: Both) -> None:
    """Sends get seq 1, 2, 3 and wait in that order; each counts the turns ahead of it."""
    sid = _sid()
    answers = [await store.enqueue(sid, _send(t)) for t in "abc"]
    assert [a.seq for a in answers] == [1, 2, 3]
    assert [a.ahead for a in answers] == [0, 1, 2]
    assert all(a.turn is None and not a.duplicate for a in answers)
    status = await store.status(sid)
    assert [w.text for w in status.waiting] == ["a", "b", "c"]
    assert [w.state for w in status.waiting] == ["waiting"] * 3
    assert status.turn is None and status.queued == 3


@_case
async def an_input_id_sent_twice_is_one_input(store: Both) -> None:
    """The second enqueue of an id changes nothing and repeats the first answer."""
    sid = _sid()
    first = await store.enqueue(sid, _send("once", "x"))
    again = await store.enqueue(sid, _steer("other text", "x"))
    assert again.duplicate and (again.id, again.kind, again.seq) == ("x", "send", first.seq)
    status = await store.status(sid)
    assert [(w.id, w.text) for w in status.waiting] == [("x", "once")]
    assert [e.kind for e in await store.events(sid, after=0, limit=100)] == ["input"]


@_case
async def racing_enqueues_of_one_id_make_one_input(store: Both, store_factory: OpenStore) -> None:
    """One id through several store objects at once (replicas retrying) is one input."""
    sid = _sid()
    async with AsyncExitStack() as stack:
        stores = [await stack.enter_async_context(store_factory()) for _ in range(4)]
        answers = await asyncio.gather(
            *(s.enqueue(sid, _send("retry", "same")) for s in stores for _ in range(2))  # type: ignore[attr-defined]
        )
    assert sum(not a.duplicate for a in answers) == 1
    assert {a.seq for a in answers} == {1}
    assert len((await store.status(sid)).waiting) == 1


# -- claims and leases ------------------------------------------------------------------------


@_case
async def a_claim_starts_the_first_input_as_a_turn(store: Both) -> None:
    """The turn is named by its prompt; the input is its prompt; later inputs stay queued."""
    sid = _sid()
    await store.save(sid, [user("before"), assistant("earlier")], at=0)
    await store.enqueue(sid, _send("first", "p1"))
    await store.enqueue(sid, _send("second", "p2"))
    claim = await _claimed(store, sid, holder="replica-a")
    assert (claim.turn, claim.prompt.text, claim.start) == ("p1", "first", 2)
    assert _ids(claim.messages) == _ids(await store.messages(sid))
    assert (claim.resumed, claim.steps, claim.steers_taken, claim.cap) == (False, 0, 0, 16)
    assert (claim.lease.holder, claim.lease.epoch, claim.lease.session) == ("replica-a", 1, sid)
    fate = await store.input(sid, "p1")
    assert fate is not None and (fate.state, fate.turn) == ("prompt", "p1")
    running = await store.turn(sid, "p1")
    assert running is not None and (running.state, running.holder, running.epoch) == (
        "running",
        "replica-a",
        1,
    )
    queued = await store.turn(sid, "p2")
    assert queued is not None and queued.state == "queued"
    status = await store.status(sid)
    assert status.turn is not None and status.turn.id == "p1" and status.queued == 1
    assert status.turn.lease_expires_at == claim.lease.expires_at


@_case
async def a_session_with_a_live_lease_or_no_work_is_not_claimed(store: Both) -> None:
    """No input: nothing to claim. A live lease: nobody else claims, not even the next input."""
    sid = _sid()
    assert await store.claim("a", seconds=LONG, cap=16, session=sid) is None
    await store.enqueue(sid, _send("one"))
    await store.enqueue(sid, _send("two"))
    await _claimed(store, sid)
    assert await store.claim("b", seconds=LONG, cap=16, session=sid) is None


@_case
async def exactly_one_of_many_claimers_wins(store: Both, store_factory: OpenStore) -> None:
    """Sixteen claims at once through four store objects: one claim, epoch 1."""
    sid = _sid()
    await store.enqueue(sid, _send("go"))
    async with AsyncExitStack() as stack:
        stores = [await stack.enter_async_context(store_factory()) for _ in range(4)]
        claims = await asyncio.gather(
            *(
                s.claim(f"r{i}-{j}", seconds=LONG, cap=16, session=sid)  # type: ignore[attr-defined]
                for i, s in enumerate(stores)
                for j in range(4)
            )
        )
    won = [c for c in claims if c is not None]
    assert len(won) == 1 and won[0].lease.epoch == 1


@_case
async def a_claim_naming_no_session_finds_one_with_work(store: Both) -> None:
    """A scanning claim reaches a session with work (others' leftovers aside)."""
    sid = _sid()
    await store.enqueue(sid, _send("find me"))
    for _ in range(10_000):
        claim = await store.claim("scanner", seconds=LONG, cap=16)
        assert claim is not None, "the scan missed a session with work"
        if claim.lease.session == sid:
            assert claim.prompt.text == "find me"
            return
    raise AssertionError("the scan never reached the session")


@_case
async def concurrent_first_sends_start_one_turn(store: Both, store_factory: OpenStore) -> None:
    """Sends racing into an idle session, claims racing after them: one turn, the first input."""
    sid = _sid()
    async with AsyncExitStack() as stack:
        stores = [await stack.enter_async_context(store_factory()) for _ in range(4)]
        await asyncio.gather(*(s.enqueue(sid, _send(f"m{i}")) for i, s in enumerate(stores)))  # type: ignore[attr-defined]
        claims = await asyncio.gather(
            *(s.claim(f"r{i}", seconds=LONG, cap=16, session=sid) for i, s in enumerate(stores))  # type: ignore[attr-defined]
        )
    won = [c for c in claims if c is not None]
    assert len(won) == 1
    status = await store.status(sid)
    assert status.waiting[0].seq == 2 and won[0].turn != status.waiting[0].id
    first = await store.input(sid, won[0].turn)
    assert first is not None and first.seq == 1
    assert status.queued == 3


@_case
async def renewing_extends_the_lease_on_the_database_clock(store: Both) -> None:
    """A renewed short lease outlives its first expiry; nobody can claim it meanwhile."""
    sid = _sid()
    await store.enqueue(sid, _send("go"))
    claim = await _claimed(store, sid, seconds=SHORT)
    renewal = await store.renew(claim.lease, seconds=LONG)
    assert renewal.lease.expires_at > claim.lease.expires_at and not renewal.stop_requested
    assert renewal.lease.epoch == claim.lease.epoch
    await asyncio.sleep(WAIT)
    assert await store.claim("b", seconds=LONG, cap=16, session=sid) is None


@_case
async def an_expired_lease_is_taken_over_and_the_turn_carried_on(store: Both) -> None:
    """After expiry another claimer resumes the same turn at epoch + 1, with what was saved."""
    sid = _sid()
    await store.enqueue(sid, _send("go", "t"))
    a = await _claimed(store, sid, holder="a", seconds=SHORT)
    await _first_step(store, a)
    await store.enqueue(sid, _steer("later", "s"))
    await asyncio.sleep(WAIT)
    b = await _claimed(store, sid, holder="b")
    assert (b.turn, b.resumed, b.lease.epoch, b.steps, b.start) == ("t", True, 2, 1, 0)
    assert _ids(b.messages) == ["t"] and b.prompt.text == "go"
    taken = await store.step(b.lease, [], at=1, take=16)
    assert _ids(taken) == ["s"], "a steer offered to the turn goes with it to the new holder"
    kinds = [e.kind for e in await store.events(sid, after=0, limit=100)]
    assert "holder" in kinds
    holder = [e for e in await store.events(sid, after=0, limit=100) if e.kind == "holder"]
    assert holder[0].data == {"holder": "b", "epoch": 2} and holder[0].turn == "t"


@_case
async def a_stale_epoch_is_refused_whole(store: Both) -> None:
    """The old holder's step, renewal and end are Fenced and change nothing."""
    sid = _sid()
    await store.enqueue(sid, _send("go"))
    a = await _claimed(store, sid, holder="a", seconds=SHORT)
    await _first_step(store, a)
    await store.enqueue(sid, _steer("wait for b"))
    await asyncio.sleep(WAIT)
    b = await _claimed(store, sid, holder="b")
    before = await store.messages(sid)
    events = await store.events(sid, after=0, limit=1000)
    with pytest.raises(Fenced):
        await store.step(a.lease, [assistant("stale")], at=len(before), take=16)
    with pytest.raises(Fenced):
        await store.renew(a.lease, seconds=LONG)
    with pytest.raises(Fenced):
        await store.end_turn(a.lease, Outcome("completed", "stale"))
    assert await store.messages(sid) == before
    assert await store.events(sid, after=0, limit=1000) == events
    status = await store.status(sid)
    assert status.turn is not None and status.turn.holder == "b" and status.turn.epoch == 2
    assert [w.state for w in status.waiting] == ["waiting"], "the steer was not taken"
    assert await store.step(b.lease, [], at=len(before), take=16) != []


# -- steps, steers and the cap ----------------------------------------------------------------


@_case
async def a_step_saves_then_takes_the_turn_s_steers_in_order(store: Both) -> None:
    """Steers offered to the turn are recorded steered after the step's messages, in order."""
    sid = _sid()
    await store.enqueue(sid, _send("plan my week", "t"))
    claim = await _claimed(store, sid)
    s1 = await store.enqueue(sid, _steer("skip friday", "s1"))
    s2 = await store.enqueue(sid, _steer("use celsius", "s2"))
    assert (s1.turn, s2.turn, s1.ahead) == ("t", "t", 0)
    taken = await _first_step(store, claim)
    assert _ids(taken) == ["s1", "s2"] and all(m.steered for m in taken)
    assert [m.text for m in taken] == ["skip friday", "use celsius"]
    stored = await store.messages(sid)
    assert _ids(stored) == ["t", "s1", "s2"] and not stored[0].steered
    fate = await store.input(sid, "s2")
    assert fate is not None and (fate.state, fate.turn, fate.step) == ("taken", "t", 1)
    status = await store.status(sid)
    assert status.turn is not None and (status.turn.steps, status.turn.steers_taken) == (1, 2)
    assert status.waiting == [] and status.queued == 0
    entries = await store.transcript(sid, after=-1, limit=10)
    assert [(e.position, e.turn, e.message.steered) for e in entries] == [
        (0, "t", False),
        (1, "t", True),
        (2, "t", True),
    ]


@_case
async def steers_are_taken_ahead_of_sends_queued_before_them(store: Both) -> None:
    """A send waits for its own turn; a steer after it joins the running turn first."""
    sid = _sid()
    await store.enqueue(sid, _send("one", "t"))
    claim = await _claimed(store, sid)
    later = await store.enqueue(sid, _send("two", "b"))
    steer = await store.enqueue(sid, _steer("now", "s"))
    assert (later.turn, later.ahead, steer.turn) == (None, 1, "t")
    assert _ids(await _first_step(store, claim)) == ["s"]
    assert await store.end_turn(claim.lease, Outcome("completed", "done")) == "b"


@_case
async def a_step_counts_only_saves_before_a_model_request(store: Both) -> None:
    """The prompt's save and a tool result's are steps; the answer's save is not."""
    sid = _sid()
    await store.enqueue(sid, _send("go", "t"))
    claim = await _claimed(store, sid)
    await _first_step(store, claim)
    await store.step(claim.lease, [assistant("the answer")], at=1, take=0)
    turn = await store.turn(sid, "t")
    assert turn is not None and turn.steps == 1
    steps = [e.data for e in await store.events(sid, after=0, limit=100) if e.kind == "step"]
    assert steps == [{"step": 1, "length": 1}]


@_case
async def a_final_save_counts_no_step_and_takes_no_steer(store: Both) -> None:
    """The save of a turn that reached ``max_steps`` stores its messages, counts no step
    and takes no steer; the steer offered to the turn is freed at its end, its own turn."""
    sid = _sid()
    await store.enqueue(sid, _send("go", "t"))
    claim = await _claimed(store, sid)
    await _first_step(store, claim)
    assert (await store.enqueue(sid, _steer("now", "s"))).turn == "t"
    last = [assistant("a call"), user("its result")]
    assert await store.step(claim.lease, last, at=1, take=0, final=True) == []
    assert _ids(await store.messages(sid)) == ["t", *_ids(last)]
    turn = await store.turn(sid, "t")
    assert turn is not None and turn.steps == 1
    steps = [e.data for e in await store.events(sid, after=0, limit=100) if e.kind == "step"]
    assert steps == [{"step": 1, "length": 1}]
    assert await store.end_turn(claim.lease, Outcome("max_steps")) == "s"
    ended = [e.data for e in await store.events(sid, after=0, limit=100) if e.kind == "turn_ended"]
    assert ended == [{"state": "max_steps", "released": ["s"]}]


@_case
async def the_cap_counts_the_steers_offered_to_a_turn(store: Both) -> None:
    """Past the cap a steer is a turn of its own; a step takes no more than the cap."""
    sid = _sid()
    await store.enqueue(sid, _send("go", "t"))
    claim = await _claimed(store, sid, cap=2)
    answers = [await store.enqueue(sid, _steer(f"s{i}", f"s{i}")) for i in range(3)]
    assert [a.turn for a in answers] == ["t", "t", None]
    assert answers[2].ahead == 1
    assert _ids(await _first_step(store, claim)) == ["s0", "s1"]
    assert await store.step(claim.lease, [], at=3, take=16) == []
    assert await store.end_turn(claim.lease, Outcome("completed")) == "s2"
    follow = await _claimed(store, sid)
    assert follow.turn == "s2" and follow.prompt.kind == "steer"


@_case
async def a_step_takes_no_more_than_asked(store: Both) -> None:
    """``take`` bounds one step; the rest stay offered for the next step."""
    sid = _sid()
    await store.enqueue(sid, _send("go"))
    claim = await _claimed(store, sid)
    for i in range(3):
        await store.enqueue(sid, _steer(f"s{i}", f"s{i}"))
    assert _ids(await _first_step(store, claim, take=1)) == ["s0"]
    assert _ids(await store.step(claim.lease, [], at=2, take=16)) == ["s1", "s2"]


@_case
async def an_agent_that_takes_no_steers_makes_each_a_turn(store: Both) -> None:
    """With cap 0 a steer is never offered; it waits as a turn of its own."""
    sid = _sid()
    await store.enqueue(sid, _send("go", "t"))
    claim = await _claimed(store, sid, cap=0)
    steer = await store.enqueue(sid, _steer("hey", "s"))
    assert steer.turn is None and steer.ahead == 1
    assert await _first_step(store, claim) == []
    assert await store.end_turn(claim.lease, Outcome("completed")) == "s"


@_case
async def a_steer_with_no_turn_running_starts_one(store: Both) -> None:
    """No turn runs: the steer is a turn of its own, and the next claim starts it."""
    sid = _sid()
    steer = await store.enqueue(sid, _steer("hello", "s"))
    assert (steer.turn, steer.ahead) == (None, 0)
    claim = await _claimed(store, sid)
    assert claim.turn == "s" and claim.prompt.kind == "steer"


@_case
async def a_conflicting_step_changes_nothing(store: Both) -> None:
    """A step at the wrong position is a conflict: no message, no steer taken."""
    sid = _sid()
    await store.enqueue(sid, _send("go"))
    claim = await _claimed(store, sid)
    await store.enqueue(sid, _steer("keep me", "s"))
    with pytest.raises(TranscriptConflict):
        await store.step(claim.lease, [user("x")], at=5, take=16)
    assert await store.messages(sid) == []
    fate = await store.input(sid, "s")
    assert fate is not None and fate.state == "waiting"
    assert _ids(await _first_step(store, claim)) == ["s"]


# -- ends and stops -------------------------------------------------------------------------------


@_case
async def a_turn_s_end_is_recorded_once_and_frees_its_untaken_steers(store: Both) -> None:
    """The end frees offered steers in their place (before later sends) and the lease."""
    sid = _sid()
    await store.enqueue(sid, _send("one", "t"))
    claim = await _claimed(store, sid)
    await _first_step(store, claim)
    await store.step(claim.lease, [assistant("answer")], at=1, take=0)
    late = await store.enqueue(sid, _steer("too late", "s"))
    await store.enqueue(sid, _send("after", "b"))
    assert late.turn == "t"
    assert await store.end_turn(claim.lease, Outcome("completed", "answer")) == "s"
    ended = await store.turn(sid, "t")
    assert ended is not None and (ended.state, ended.text, ended.end) == ("completed", "answer", 2)
    assert ended.holder is None
    fate = await store.input(sid, "s")
    assert fate is not None and (fate.state, fate.turn) == ("waiting", None)
    status = await store.status(sid)
    assert status.turn is None and [w.id for w in status.waiting] == ["s", "b"]
    assert status.queued == 2
    with pytest.raises(Fenced):
        await store.end_turn(claim.lease, Outcome("failed"))
    with pytest.raises(Fenced):
        await store.step(claim.lease, [], at=2, take=16)
    assert [
        e.data["state"]
        for e in await store.events(sid, after=0, limit=100)
        if e.kind == "turn_ended"
    ] == ["completed"]
    follow = await _claimed(store, sid)
    assert follow.turn == "s" and follow.lease.epoch == 2 and follow.start == 2


@_case
async def a_stop_reaches_the_holder_and_the_turn_takes_nothing_more(store: Both) -> None:
    """``stop`` marks the turn: renew tells the holder, steps take none, later steers wait."""
    sid = _sid()
    assert await store.stop(sid) is None
    await store.enqueue(sid, _send("go", "t"))
    claim = await _claimed(store, sid)
    await _first_step(store, claim)
    await store.enqueue(sid, _steer("offered", "s1"))
    assert await store.stop(sid) == "t"
    assert await store.stop(sid) == "t"
    after = await store.enqueue(sid, _steer("after the stop", "s2"))
    assert after.turn is None
    renewal = await store.renew(claim.lease, seconds=LONG)
    assert renewal.stop_requested
    assert await store.step(claim.lease, [], at=1, take=16) == []
    status = await store.status(sid)
    assert status.turn is not None and status.turn.stop_requested
    assert await store.end_turn(claim.lease, Outcome("stopped")) == "s1"
    assert [w.id for w in (await store.status(sid)).waiting] == ["s1", "s2"]
    assert [e.kind for e in await store.events(sid, after=0, limit=100)].count("stop") == 1


@_case
async def a_stop_waits_for_a_turn_whose_holder_died(store: Both) -> None:
    """A turn stopped while nobody held it is claimed with ``stop_requested``."""
    sid = _sid()
    await store.enqueue(sid, _send("go"))
    await _claimed(store, sid, seconds=SHORT)
    await store.stop(sid)
    await asyncio.sleep(WAIT)
    claim = await _claimed(store, sid, holder="b")
    assert claim.resumed and claim.stop_requested


# -- views and events -----------------------------------------------------------------------------


@_case
async def events_tell_the_story_with_ids_in_order(store: Both, store_factory: OpenStore) -> None:
    """Each write appends its events; ids count from 1; any store object reads the same."""
    sid = _sid()
    await store.enqueue(sid, _send("go", "t"))
    claim = await _claimed(store, sid, holder="r1")
    await store.enqueue(sid, _steer("steer", "s"))
    await _first_step(store, claim)
    await store.step(claim.lease, [assistant("done")], at=2, take=0)
    await store.end_turn(claim.lease, Outcome("completed", "done"))
    events = await store.events(sid, after=0, limit=100)
    assert [e.id for e in events] == list(range(1, len(events) + 1))
    assert [(e.kind, e.turn) for e in events] == [
        ("input", None),
        ("turn_started", "t"),
        ("input", "t"),
        ("message", "t"),
        ("steers_taken", "t"),
        ("message", "t"),
        ("step", "t"),
        ("message", "t"),
        ("turn_ended", "t"),
    ]
    assert events[0].data == {"id": "t", "kind": "send", "turn": None}
    assert events[1].data == {"epoch": 1, "holder": "r1", "resumed": False}
    assert events[4].data == {"ids": ["s"], "step": 1}
    assert events[5].data == {"position": 1, "id": "s", "role": "user", "steered": True}
    assert events[-1].data == {"state": "completed", "released": []}
    assert all(isinstance(e.at, float) for e in events)
    assert await store.events(sid, after=6, limit=2) == events[6:8]
    async with store_factory() as other:
        assert await other.events(sid, after=0, limit=100) == events  # type: ignore[attr-defined]


@_case
async def the_transcript_view_pages_and_names_each_message_s_turn(store: Both) -> None:
    """Positions from ``after`` on, at most ``limit``; messages before any turn have none."""
    sid = _sid()
    await store.save(sid, [user("old")], at=0)
    await store.enqueue(sid, _send("go", "t"))
    claim = await _claimed(store, sid)
    await _first_step(store, claim)
    await store.step(claim.lease, [Message("assistant", (Text("hi"),))], at=2, take=0)
    page = await store.transcript(sid, after=0, limit=1)
    assert [(e.position, e.turn, e.message.text) for e in page] == [(1, "t", "go")]
    whole = await store.transcript(sid, after=-1, limit=100)
    assert [(e.position, e.turn) for e in whole] == [(0, None), (1, "t"), (2, "t")]
    assert await store.transcript(sid, after=2, limit=100) == []


@_case
async def a_session_nobody_used_has_an_empty_status(store: Both) -> None:
    """Unknown sessions, inputs and turns are empty answers, not errors."""
    sid = _sid()
    status = await store.status(sid)
    assert (status.session, status.turn, status.waiting, status.queued) == (sid, None, [], 0)
    assert await store.input(sid, "nope") is None
    assert await store.turn(sid, "nope") is None
    assert await store.transcript(sid, after=-1, limit=10) == []
    assert await store.events(sid, after=0, limit=10) == []


@_case
async def input_text_round_trips_exactly(store: Both) -> None:
    """Astral, combining, NUL and quotes come back unchanged in inputs and their messages."""
    sid = _sid()
    text = 'a\x00b "q" \\ e\u0301 \U0001f600 \n end'
    await store.enqueue(sid, _send(text, "t"))
    status = await store.status(sid)
    assert status.waiting[0].text == text
    claim = await _claimed(store, sid)
    assert claim.prompt.text == text
    await _first_step(store, claim)
    assert (await store.messages(sid))[0].text == text


@needs("persistent")
@_case
async def the_queue_and_the_lease_outlive_the_store_object(
    store: Both, store_factory: OpenStore
) -> None:
    """A new store object sees the running turn, its holder and the waiting inputs."""
    sid = _sid()
    await store.enqueue(sid, _send("go", "t"))
    claim = await _claimed(store, sid, holder="r1")
    await store.enqueue(sid, _send("next", "b"))
    async with store_factory() as fresh:
        status = await fresh.status(sid)  # type: ignore[attr-defined]
        assert status.turn.id == "t" and status.turn.holder == "r1"
        assert [w.id for w in status.waiting] == ["b"]
        await fresh.renew(claim.lease, seconds=LONG)  # type: ignore[attr-defined]


@_case
async def an_older_lease_of_the_same_holder_is_fenced(store: Both) -> None:
    """Fencing is by epoch: a holder that claimed again cannot write with its old lease."""
    sid = _sid()
    await store.enqueue(sid, _send("go"))
    old = await _claimed(store, sid, holder="a", seconds=SHORT)
    await asyncio.sleep(WAIT)
    new = await _claimed(store, sid, holder="a")
    assert new.lease.epoch == old.lease.epoch + 1 and new.resumed
    with pytest.raises(Fenced):
        await store.step(old.lease, [old.prompt.message(steered=False)], at=0, take=16)
    with pytest.raises(Fenced):
        await store.renew(old.lease, seconds=LONG)
    with pytest.raises(Fenced):
        await store.end_turn(old.lease, Outcome("completed"))
    assert await store.messages(sid) == []
    assert await _first_step(store, new) == []


@_case
async def a_scanning_claim_skips_a_session_with_a_live_lease(store: Both) -> None:
    """A scan never returns a session whose lease is live, even when it has inputs waiting."""
    sid = _sid()
    await store.enqueue(sid, _send("one"))
    await store.enqueue(sid, _send("two"))
    await _claimed(store, sid, holder="a")
    for _ in range(10_000):
        claim = await store.claim("scanner", seconds=LONG, cap=16)
        if claim is None:
            return
        assert claim.lease.session != sid, "the scan claimed a session with a live lease"
    raise AssertionError("the scan never ran out of sessions")


@_case
async def a_repeated_steer_id_repeats_its_first_answer(store: Both) -> None:
    """A steer offered to the running turn, sent again, is still answered with that turn."""
    sid = _sid()
    await store.enqueue(sid, _send("go", "t"))
    await _claimed(store, sid)
    await store.enqueue(sid, _send("queued"))
    first = await store.enqueue(sid, _steer("once", "s"))
    again = await store.enqueue(sid, _steer("once", "s"))
    assert (first.turn, first.duplicate) == ("t", False)
    assert (again.turn, again.ahead, again.seq, again.duplicate) == ("t", first.ahead, 3, True)
    queued = await store.enqueue(sid, _send("later", "q"))
    assert (await store.enqueue(sid, _send("later", "q"))).ahead == queued.ahead == 2


# -- listing -------------------------------------------------------------------------------------


@_case
async def sessions_are_listed_by_prefix_in_code_point_order_with_their_state(
    store: Both,
) -> None:
    """Only the prefix's sessions that had an input, sorted by code point, each with its state."""
    prefix = f"list-{new_id()}/"
    names = [prefix + n for n in ("b", "B", "a", "\u00e9", "z", "\U0001f600", "a b")]
    for name in names:
        await store.enqueue(name, _send("hi"))
    await store.enqueue(f"list-{new_id()}/a", _send("another prefix"))
    await store.save(prefix + "core-only", [user("no input")], at=0)
    await _claimed(store, prefix + "a")
    await store.enqueue(prefix + "a", _send("waits"))
    listed = await store.sessions(prefix=prefix, after=None, limit=100)
    assert [s.session for s in listed] == sorted(names)
    by_name = {s.session: s for s in listed}
    running = by_name[prefix + "a"]
    assert (running.state, running.turn, running.queued) == ("running", running.turn, 1)
    assert running.turn is not None
    assert (by_name[prefix + "b"].state, by_name[prefix + "b"].queued) == ("queued", 1)
    assert all(isinstance(s.updated_at, float) and s.updated_at > 0 for s in listed)


@_case
async def a_listing_pages_after_an_id_and_filters_by_state(store: Both) -> None:
    """``after`` continues a listing where a page ended; ``state`` keeps only those in it."""
    prefix = f"list-{new_id()}/"
    for name in ("1", "2", "3", "4", "5"):
        await store.enqueue(prefix + name, _send("hi"))
    claim = await _claimed(store, prefix + "2")
    await store.end_turn(claim.lease, Outcome("completed"))
    await _claimed(store, prefix + "4")
    first = await store.sessions(prefix=prefix, after=None, limit=2)
    second = await store.sessions(prefix=prefix, after=first[-1].session, limit=2)
    rest = await store.sessions(prefix=prefix, after=second[-1].session, limit=2)
    assert [s.session[-1] for s in first + second + rest] == ["1", "2", "3", "4", "5"]
    assert [
        s.session[-1]
        for s in await store.sessions(prefix=prefix, after=None, limit=10, state="idle")
    ] == ["2"]
    assert [
        s.session[-1]
        for s in await store.sessions(prefix=prefix, after=None, limit=10, state="running")
    ] == ["4"]
    assert [
        s.session[-1]
        for s in await store.sessions(prefix=prefix, after=None, limit=10, state="queued")
    ] == ["1", "3", "5"]
    assert await store.sessions(prefix=f"list-{new_id()}/", after=None, limit=10) == []


@_case
async def a_listing_filters_by_state_before_its_limit(store: Both) -> None:
    """A page of one running session is the first running one, past the idle ones before it."""
    prefix = f"list-{new_id()}/"
    for name in ("1", "2", "3"):
        await store.enqueue(prefix + name, _send("hi"))
    await _claimed(store, prefix + "3")
    page = await store.sessions(prefix=prefix, after=None, limit=1, state="running")
    assert [s.session for s in page] == [prefix + "3"]
