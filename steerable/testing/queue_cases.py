"""The service store contract's cases for the queue: where a steer goes, conditional and
bounded inputs, cancelling, the stop poll, the bounded and paged views, metadata, trace
contexts and times.

They join :data:`steerable.testing.service_cases.SERVICE_CASES` (so every store that runs
the service contract runs them) and follow its rules: fresh session ids, holder names of
their own where a case reads by holder.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import AsyncExitStack
from typing import Any

import pytest

from steerable.errors import QueueFull, SessionNotIdle, TurnMismatch
from steerable.messages import assistant, new_id, user
from steerable.service_store import TRACE_CHARS, Input, Outcome
from steerable.testing.abilities import OpenStore, needs
from steerable.testing.service_cases import (
    LONG,
    SHORT,
    WAIT,
    Both,
    _case,
    _claimed,
    _first_step,
    _ids,
    _send,
    _sid,
    _steer,
)

CLOCK = 300.0
"""How far a database's clock may be from this process's in the time checks (seconds)."""


async def _event_count(store: Both, sid: str) -> int:
    return len(await store.events(sid, after=0, limit=1000))


# -- where a steer goes ---------------------------------------------------------------------


@_case
async def a_steer_is_offered_to_the_turn_at_the_head_of_the_queue(store: Both) -> None:
    """With no turn running, a steer joins the turn the next claim starts; its first step
    takes it."""
    sid = _sid()
    sent = await store.enqueue(sid, _send("go", "t"))
    steered = await store.enqueue(sid, _steer("and this", "s"))
    assert (sent.ahead, steered.turn, steered.ahead) == (0, "t", 0)
    fate = await store.input(sid, "s")
    assert fate is not None and (fate.state, fate.turn) == ("waiting", "t")
    status = await store.status(sid)
    assert status.queued == 1 and status.waiting_total == 2
    claim = await _claimed(store, sid)
    assert claim.turn == "t"
    assert _ids(await _first_step(store, claim)) == ["s"]
    taken = await store.input(sid, "s")
    assert taken is not None and (taken.state, taken.turn, taken.step) == ("taken", "t", 1)


@_case
async def steers_offered_before_the_claim_count_toward_the_cap(store: Both) -> None:
    """The head's steers are offered without a cap; the claim counts them against it."""
    sid = _sid()
    await store.enqueue(sid, _send("go", "t"))
    first = [await store.enqueue(sid, _steer(f"s{i}", f"s{i}")) for i in range(2)]
    assert [a.turn for a in first] == ["t", "t"]
    claim = await _claimed(store, sid, cap=2)
    late = await store.enqueue(sid, _steer("over the cap", "s2"))
    assert late.turn is None
    assert _ids(await _first_step(store, claim)) == ["s0", "s1"]


@_case
async def a_steer_after_the_turn_ended_is_a_turn_of_its_own(store: Both) -> None:
    """Nothing running and nothing waiting: the steer answers None and the claim starts it."""
    sid = _sid()
    await store.enqueue(sid, _send("go", "t"))
    claim = await _claimed(store, sid)
    await _first_step(store, claim)
    await store.step(claim.lease, [assistant("done")], at=1, take=0)
    assert await store.end_turn(claim.lease, Outcome("completed", "done")) is None
    late = await store.enqueue(sid, _steer("one more thing", "s"))
    assert (late.turn, late.ahead) == (None, 0)
    follow = await _claimed(store, sid)
    assert follow.turn == "s" and follow.prompt.text == "one more thing"
    view = await store.input(sid, "s")
    assert view is not None and (view.state, view.turn) == ("prompt", "s")


@_case
async def an_id_sent_again_after_it_was_taken_or_started_changes_nothing(store: Both) -> None:
    """A retried id repeats its first answer once its input was taken or became a prompt."""
    sid = _sid()
    first = await store.enqueue(sid, _send("go", "t"))
    claim = await _claimed(store, sid)
    steered = await store.enqueue(sid, _steer("s", "s"))
    await _first_step(store, claim)
    before = await _event_count(store, sid)
    again = await store.enqueue(sid, _send("go", "t"))
    again_steer = await store.enqueue(sid, _steer("s", "s"))
    assert again.duplicate and again_steer.duplicate
    assert (again.seq, again.turn, again.ahead) == (first.seq, first.turn, first.ahead)
    assert (again_steer.seq, again_steer.turn) == (steered.seq, steered.turn)
    assert await _event_count(store, sid) == before
    status = await store.status(sid)
    assert status.waiting == [] and status.queued == 0
    assert [m.id for m in await store.messages(sid)] == ["t", "s"]


@_case
async def the_turn_ended_event_names_the_steers_it_released(store: Both) -> None:
    """Steers offered and never taken are listed in ``turn_ended`` as ``released``."""
    sid = _sid()
    await store.enqueue(sid, _send("go", "t"))
    await store.enqueue(sid, _steer("early", "s1"))
    claim = await _claimed(store, sid)
    await store.step(claim.lease, [claim.prompt.message(steered=False)], at=0, take=0)
    await store.enqueue(sid, _steer("late", "s2"))
    await store.end_turn(claim.lease, Outcome("stopped"))
    ended = [e for e in await store.events(sid, after=0, limit=100) if e.kind == "turn_ended"]
    assert [e.data for e in ended] == [{"state": "stopped", "released": ["s1", "s2"]}]
    status = await store.status(sid)
    assert [(w.id, w.turn) for w in status.waiting] == [("s1", None), ("s2", None)]


# -- conditional and bounded inputs ---------------------------------------------------------


@_case
async def a_send_if_idle_is_refused_unless_the_session_is_idle(store: Both) -> None:
    """Refused whole while an input waits or a turn runs; its retry is the first answer."""
    sid = _sid()
    first = await store.enqueue(sid, _send("go", "t"), if_idle=True)
    assert first.ahead == 0
    events = await _event_count(store, sid)
    with pytest.raises(SessionNotIdle) as waiting:
        await store.enqueue(sid, _send("too", "u"), if_idle=True)
    assert waiting.value.turn is None and waiting.value.waiting == 1
    again = await store.enqueue(sid, _send("go", "t"), if_idle=True)
    assert again.duplicate
    claim = await _claimed(store, sid)
    with pytest.raises(SessionNotIdle) as running:
        await store.enqueue(sid, _send("too", "u"), if_idle=True)
    assert running.value.turn == "t"
    assert await store.input(sid, "u") is None
    assert await _event_count(store, sid) == events + 1  # the claim's turn_started only
    await store.end_turn(claim.lease, Outcome("completed"))
    later = await store.enqueue(sid, _send("now", "u"), if_idle=True)
    assert later.seq == 2 and later.ahead == 0


@_case
async def racing_sends_if_idle_accept_one(store: Both, store_factory: OpenStore) -> None:
    """Sends "if idle" racing through several store objects: exactly one is accepted."""
    sid = _sid()

    async def send(s: Any, i: int) -> bool:
        try:
            await s.enqueue(sid, _send(f"m{i}"), if_idle=True)
        except SessionNotIdle:
            return False
        return True

    async with AsyncExitStack() as stack:
        stores = [await stack.enter_async_context(store_factory()) for _ in range(4)]
        won = await asyncio.gather(*(send(s, i) for i, s in enumerate(stores) for _ in range(2)))
    assert sum(won) == 1
    assert (await store.status(sid)).waiting_total == 1


@_case
async def a_steer_for_an_expected_turn_joins_it_or_is_refused(store: Both) -> None:
    """``expected_turn``: accepted only when the steer is offered to that turn."""
    sid = _sid()
    with pytest.raises(TurnMismatch) as idle:
        await store.enqueue(sid, _steer("x", "s0"), expected_turn="t")
    assert idle.value.offered is None
    await store.enqueue(sid, _send("go", "t"))
    head = await store.enqueue(sid, _steer("before the claim", "s1"), expected_turn="t")
    assert head.turn == "t"
    await _claimed(store, sid)
    joined = await store.enqueue(sid, _steer("y", "s2"), expected_turn="t")
    assert joined.turn == "t"
    with pytest.raises(TurnMismatch) as other:
        await store.enqueue(sid, _steer("z", "s3"), expected_turn="old")
    assert (other.value.expected, other.value.offered) == ("old", "t")
    events = await _event_count(store, sid)
    await store.stop(sid)
    with pytest.raises(TurnMismatch) as stopping:
        await store.enqueue(sid, _steer("z", "s4"), expected_turn="t")
    assert stopping.value.offered is None
    assert await store.input(sid, "s3") is None and await store.input(sid, "s4") is None
    assert await _event_count(store, sid) == events + 1  # the stop's only


@_case
async def a_full_queue_refuses_more_inputs(store: Both) -> None:
    """``max_waiting``: refused while that many wait; room again once one is a turn."""
    sid = _sid()
    for i in range(3):
        await store.enqueue(sid, _send(f"m{i}", f"m{i}"), max_waiting=3)
    with pytest.raises(QueueFull) as full:
        await store.enqueue(sid, _steer("one more", "x"), max_waiting=3)
    assert full.value.limit == 3
    assert (await store.enqueue(sid, _send("m0", "m0"), max_waiting=3)).duplicate
    assert await store.input(sid, "x") is None
    await _claimed(store, sid)
    assert (await store.enqueue(sid, _send("x", "x"), max_waiting=3)).seq == 4


# -- cancelling -----------------------------------------------------------------------------


@_case
async def a_cancelled_input_is_never_a_turn(store: Both) -> None:
    """A queued input taken back is skipped by the claims; an answered one stays answered."""
    sid = _sid()
    for name in "abc":
        await store.enqueue(sid, _send(name, name))
    view = await store.cancel(sid, "b")
    assert view is not None and (view.state, view.turn) == ("cancelled", None)
    again = await store.cancel(sid, "b")
    assert again is not None and again.state == "cancelled"
    assert await store.cancel(sid, "nope") is None
    assert await store.turn(sid, "b") is None
    status = await store.status(sid)
    assert [w.id for w in status.waiting] == ["a", "c"] and status.queued == 2
    claim = await _claimed(store, sid)
    assert claim.turn == "a"
    prompt = await store.cancel(sid, "a")
    assert prompt is not None and prompt.state == "prompt"
    await store.end_turn(claim.lease, Outcome("completed"))
    assert (await _claimed(store, sid)).turn == "c"
    cancelled = [e for e in await store.events(sid, after=0, limit=100) if e.kind == "cancelled"]
    assert [(e.turn, e.data) for e in cancelled] == [(None, {"id": "b", "released": []})]


@_case
async def a_cancelled_steer_is_not_taken(store: Both) -> None:
    """A steer offered to the running turn and taken back is not taken by its next step."""
    sid = _sid()
    await store.enqueue(sid, _send("go", "t"))
    claim = await _claimed(store, sid)
    await store.enqueue(sid, _steer("never mind", "s1"))
    await store.enqueue(sid, _steer("this one", "s2"))
    view = await store.cancel(sid, "s1")
    assert view is not None and view.state == "cancelled"
    assert _ids(await _first_step(store, claim)) == ["s2"]
    taken = await store.cancel(sid, "s2")
    assert taken is not None and (taken.state, taken.turn) == ("taken", "t")
    events = [e for e in await store.events(sid, after=0, limit=100) if e.kind == "cancelled"]
    assert [(e.turn, e.data["id"]) for e in events] == [("t", "s1")]


@_case
async def cancelling_the_head_frees_the_steers_offered_to_it(store: Both) -> None:
    """The head's steers become turns of their own, in their place, listed as released."""
    sid = _sid()
    await store.enqueue(sid, _send("go", "t"))
    await store.enqueue(sid, _steer("with this", "s"))
    await store.enqueue(sid, _send("later", "u"))
    await store.cancel(sid, "t")
    fate = await store.input(sid, "s")
    assert fate is not None and (fate.state, fate.turn) == ("waiting", None)
    cancelled = [e for e in await store.events(sid, after=0, limit=100) if e.kind == "cancelled"]
    assert [e.data for e in cancelled] == [{"id": "t", "released": ["s"]}]
    assert (await _claimed(store, sid)).turn == "s"


@_case
async def a_cancel_racing_a_claim_has_one_winner(store: Both, store_factory: OpenStore) -> None:
    """The head cancelled while replicas claim: it is a prompt or cancelled, never both."""
    for _ in range(3):
        sid = _sid()
        await store.enqueue(sid, _send("go", "t"))
        async with AsyncExitStack() as stack:
            a, b = [await stack.enter_async_context(store_factory()) for _ in range(2)]
            claim, view = await asyncio.gather(
                a.claim("racer", seconds=LONG, cap=16, session=sid),  # type: ignore[attr-defined]
                b.cancel(sid, "t"),  # type: ignore[attr-defined]
            )
        final = await store.input(sid, "t")
        assert final is not None and view is not None
        if claim is not None:
            assert claim.turn == "t" and final.state == view.state == "prompt"
        else:
            assert final.state == view.state == "cancelled"


# -- the stop poll --------------------------------------------------------------------------


@_case
async def stopping_names_the_holder_s_sessions_asked_to_stop(store: Both) -> None:
    """``stopping(holder)`` lists the sessions it holds with a stop waiting, and no others."""
    holder, other = f"h-{new_id()}", f"h-{new_id()}"
    one, two = _sid(), _sid()
    for sid in (one, two):
        await store.enqueue(sid, _send("go", "t"))
    first = await _claimed(store, one, holder=holder)
    await _claimed(store, two, holder=other)
    assert await store.stopping(holder) == []
    await store.stop(one)
    await store.stop(two)
    assert await store.stopping(holder) == [one]
    assert await store.stopping(other) == [two]
    await store.end_turn(first.lease, Outcome("stopped"))
    assert await store.stopping(holder) == []


# -- bounded and paged views ----------------------------------------------------------------


@_case
async def the_status_lists_only_the_first_waiting_inputs(store: Both) -> None:
    """``limit`` bounds the waiting inputs returned; the counts are of all of them."""
    sid = _sid()
    for i in range(5):
        await store.enqueue(sid, _send(f"m{i}", f"m{i}"))
    status = await store.status(sid, limit=2)
    assert [w.id for w in status.waiting] == ["m0", "m1"]
    assert (status.waiting_total, status.queued) == (5, 5)
    assert (await store.status(sid, limit=0)).waiting == []


@_case
async def inputs_page_by_seq_and_filter_by_state(store: Both) -> None:
    """``inputs`` pages after a seq, in order, with an optional state."""
    sid = _sid()
    await store.enqueue(sid, _send("go", "t"))
    claim = await _claimed(store, sid)
    for i in range(4):
        await store.enqueue(sid, _send(f"m{i}", f"m{i}"))
    await store.cancel(sid, "m1")
    page = await store.inputs(sid, after=0, limit=2)
    assert [(v.id, v.seq, v.state) for v in page] == [("t", 1, "prompt"), ("m0", 2, "waiting")]
    rest = await store.inputs(sid, after=page[-1].seq, limit=10)
    assert [v.id for v in rest] == ["m1", "m2", "m3"]
    waiting = await store.inputs(sid, after=0, limit=10, state="waiting")
    assert [v.id for v in waiting] == ["m0", "m2", "m3"]
    assert await store.inputs(sid, after=5, limit=10) == []
    assert await store.inputs(_sid(), after=0, limit=10) == []
    await store.end_turn(claim.lease, Outcome("completed"))


@_case
async def turns_are_listed_in_order_with_times_and_usage(store: Both) -> None:
    """``turns`` pages the turns that started, by their prompts' seq; queued ones are not."""
    sid = _sid()
    before = time.time()
    for name in "abc":
        await store.enqueue(sid, _send(name, name))
    for name in "ab":
        claim = await _claimed(store, sid)
        assert claim.turn == name
        usage = {"input_tokens": 10, "output_tokens": 2}
        await store.end_turn(claim.lease, Outcome("completed", name, usage=usage))
    running = await _claimed(store, sid)
    await store.enqueue(sid, _send("d", "d"))
    page = await store.turns(sid, after=0, limit=2)
    assert [(t.id, t.seq, t.state) for t in page] == [("a", 1, "completed"), ("b", 2, "completed")]
    assert page[0].usage == {"input_tokens": 10, "output_tokens": 2}
    for t in page:
        assert t.started_at is not None and t.ended_at is not None
        assert before - CLOCK < t.started_at <= t.ended_at < time.time() + CLOCK
    rest = await store.turns(sid, after=page[-1].seq, limit=2)
    assert [(t.id, t.state, t.ended_at) for t in rest] == [("c", "running", None)]
    assert rest[0].started_at is not None and rest[0].usage == {}
    queued = await store.turn(sid, "d")
    assert queued is not None and (queued.state, queued.seq) == ("queued", 4)
    await store.end_turn(running.lease, Outcome("completed"))


# -- metadata and times ---------------------------------------------------------------------


METADATA = {"user": "ana", "tags": ["a", "b"], "n": 3, "nested": {"ok": True, "x": None}}


@_case
async def an_input_s_metadata_and_time_are_kept(store: Both) -> None:
    """Metadata comes back as sent (``{}`` when none), in every view; ``at`` is its arrival."""
    sid = _sid()
    before = time.time()
    await store.enqueue(sid, Input("send", "go", "t", dict(METADATA)))
    await store.enqueue(sid, _steer("plain", "s"))
    view = await store.input(sid, "t")
    assert view is not None and view.metadata == METADATA
    assert before - CLOCK < view.at < time.time() + CLOCK
    plain = await store.input(sid, "s")
    assert plain is not None and plain.metadata == {}
    status = await store.status(sid)
    assert [w.metadata for w in status.waiting] == [METADATA, {}]
    listed = await store.inputs(sid, after=0, limit=10)
    assert listed[0].metadata == METADATA


# -- trace contexts (issue 21) ----------------------------------------------------------------

_STATE = "rojo=00f067aa0ba902b7,congo="
TRACE = {
    "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    "tracestate": _STATE + "t" * (TRACE_CHARS - len(_STATE)),  # as long as an input keeps
}
STEER_TRACE = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}


@_case
async def an_input_s_trace_is_kept_apart_from_its_metadata(store: Both) -> None:
    """A send's and a steer's trace context come back as sent in every view, and not in the
    metadata; an input sent without one reads ``{}``."""
    sid = _sid()
    await store.enqueue(sid, Input("send", "go", "t", dict(METADATA), dict(TRACE)))
    await store.enqueue(sid, Input("steer", "and this", "s", trace=dict(STEER_TRACE)))
    await store.enqueue(sid, _send("plain", "p"))
    view = await store.input(sid, "t")
    assert view is not None and (view.trace, view.metadata) == (TRACE, METADATA)
    steer = await store.input(sid, "s")
    assert steer is not None and (steer.trace, steer.metadata) == (STEER_TRACE, {})
    plain = await store.input(sid, "p")
    assert plain is not None and plain.trace == {}
    status = await store.status(sid)
    assert [w.trace for w in status.waiting] == [TRACE, STEER_TRACE, {}]
    listed = await store.inputs(sid, after=0, limit=10)
    assert [v.trace for v in listed] == [TRACE, STEER_TRACE, {}]


@_case
async def a_claim_and_its_takeover_hand_the_prompt_over_with_its_trace(store: Both) -> None:
    """The claimer of a turn, and the replica that takes it over after the lease expired,
    get its prompt with the trace context it was sent with."""
    sid = _sid()
    sent = Input("send", "go", "t", dict(METADATA), dict(TRACE))
    await store.enqueue(sid, sent)
    first = await _claimed(store, sid, holder="a", seconds=SHORT)
    assert not first.resumed and first.prompt == sent
    await _first_step(store, first)
    await asyncio.sleep(WAIT)
    second = await _claimed(store, sid, holder="b")
    assert (second.turn, second.resumed) == ("t", True)
    assert second.prompt == sent
    view = await store.input(sid, "t")
    assert view is not None and (view.state, view.trace) == ("prompt", TRACE)


@_case
async def a_takeover_names_the_holder_it_took_the_turn_from(store: Both) -> None:
    """A fresh claim has no previous holder; each takeover of an expired lease names the
    replica that held the turn just before it, and the next turn's claim again none."""
    sid = _sid()
    await store.enqueue(sid, _send("go", "t"))
    await store.enqueue(sid, _send("next", "u"))
    first = await _claimed(store, sid, holder="r1", seconds=SHORT)
    assert (first.resumed, first.previous_holder) == (False, None)
    await _first_step(store, first)
    await asyncio.sleep(WAIT)
    second = await _claimed(store, sid, holder="r2", seconds=SHORT)
    assert (second.turn, second.resumed, second.previous_holder) == ("t", True, "r1")
    await asyncio.sleep(WAIT)
    third = await _claimed(store, sid, holder="r3")
    assert (third.turn, third.resumed, third.previous_holder) == ("t", True, "r2")
    assert await store.end_turn(third.lease, Outcome("completed")) == "u"
    follow = await _claimed(store, sid, holder="r4")
    assert (follow.turn, follow.resumed, follow.previous_holder) == ("u", False, None)


@_case
async def a_released_steer_s_turn_carries_the_steer_s_trace(store: Both) -> None:
    """A steer offered to the running turn, never taken and freed at its end, becomes a turn
    whose prompt has the steer's trace context, not the first turn's."""
    sid = _sid()
    await store.enqueue(sid, Input("send", "go", "t", trace=dict(TRACE)))
    claim = await _claimed(store, sid)
    steer = Input("steer", "late", "s", trace=dict(STEER_TRACE))
    assert (await store.enqueue(sid, steer)).turn == "t"
    assert await _first_step(store, claim, take=0) == []
    assert await store.end_turn(claim.lease, Outcome("stopped")) == "s"
    follow = await _claimed(store, sid)
    assert (follow.turn, follow.resumed) == ("s", False)
    assert follow.prompt == steer
    view = await store.input(sid, "s")
    assert view is not None and (view.state, view.trace) == ("prompt", STEER_TRACE)


@_case
async def an_input_sent_again_with_another_trace_keeps_the_first(store: Both) -> None:
    """A duplicate id changes nothing, its trace context included."""
    sid = _sid()
    await store.enqueue(sid, Input("send", "go", "t", trace=dict(TRACE)))
    again = await store.enqueue(sid, Input("send", "go", "t", trace=dict(STEER_TRACE)))
    assert again.duplicate
    await store.enqueue(sid, Input("send", "next", "u"))
    retried = await store.enqueue(sid, Input("send", "next", "u", trace=dict(STEER_TRACE)))
    assert retried.duplicate
    assert [w.trace for w in (await store.status(sid)).waiting] == [TRACE, {}]
    claim = await _claimed(store, sid)
    assert claim.prompt.trace == TRACE


@_case
async def a_session_s_metadata_is_replaced_and_returned(store: Both) -> None:
    """``set_metadata`` replaces it whole; status and the listing return it."""
    sid = _sid()
    await store.set_metadata(sid, {"title": "first"})
    assert (await store.status(sid)).metadata == {"title": "first"}
    await store.enqueue(sid, _send("go", "t"))
    await store.set_metadata(sid, dict(METADATA))
    assert (await store.status(sid)).metadata == METADATA
    listed = await store.sessions(prefix=sid, after=None, limit=10)
    assert [(s.session, s.metadata) for s in listed] == [(sid, METADATA)]
    await store.set_metadata(sid, {})
    assert (await store.status(sid)).metadata == {}


@_case
@needs("rewritable")
async def a_deleted_session_forgets_its_metadata(store: Both) -> None:
    """The store's ``delete`` forgets the session's metadata with the rest."""
    sid = _sid()
    await store.enqueue(sid, _send("go", "t"))
    await store.set_metadata(sid, {"title": "gone soon"})
    assert await store.delete(sid)  # type: ignore[attr-defined]
    assert (await store.status(sid)).metadata == {}


@_case
async def messages_carry_the_time_they_were_stored(store: Both) -> None:
    """Every stored message has a time, through a step and through the core's save."""
    sid = _sid()
    before = time.time()
    await store.save(sid, [user("before the service")], at=0)
    await store.enqueue(sid, _send("go", "t"))
    claim = await _claimed(store, sid)
    await _first_step(store, claim)
    entries = await store.transcript(sid, after=-1, limit=10)
    assert len(entries) == 2
    for entry in entries:
        assert entry.at is not None and before - CLOCK < entry.at < time.time() + CLOCK


@_case
async def a_claim_hands_the_prompt_over_with_its_metadata(store: Both) -> None:
    """The turn's prompt comes to the claimer as it was sent, metadata and all."""
    sid = _sid()
    await store.enqueue(sid, Input("send", "go", "t", dict(METADATA)))
    claim = await _claimed(store, sid)
    assert claim.prompt == Input("send", "go", "t", METADATA)
