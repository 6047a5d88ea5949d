"""The service contract's cases of a claim that makes the turn's first step.

``claim(..., first=True)`` claims a new turn and, in the same atomic operation, stores the
prompt's message at the turn's start and takes up to ``cap`` steers offered to the turn after
it, as ``step(lease, [prompt message], at=start, take=cap)`` would right after the claim:
the same rows, counts and events (:mod:`steerable.service_store`). A turn then costs one
store call fewer. A takeover makes no step: what the earlier holder stored is carried on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from steerable.messages import Message, assistant, new_id, user
from steerable.service_store import Claim, Input, Known, Outcome
from steerable.testing.service_cases import LONG, SHORT, WAIT, Both

SERVICE_CASES: list[Callable[..., Coroutine[Any, Any, None]]] = []
"""The cases, in the order they run; they join the service contract."""


def _case(case: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., Any]:
    SERVICE_CASES.append(case)
    return case


def _sid() -> str:
    return f"first-{new_id()}"


async def _claim(
    store: Both, sid: str, *, cap: int = 16, seconds: float = LONG, holder: str = "a", **kw: Any
) -> Claim:
    claim = await store.claim(holder, seconds=seconds, cap=cap, session=sid, first=True, **kw)
    assert claim is not None, f"nothing to claim in {sid}"
    return claim


def _ids(messages: list[Message] | None) -> list[str] | None:
    return None if messages is None else [m.id for m in messages]


async def _made_no_step(store: Both, sid: str, claim: Claim) -> None:
    """``claim`` of ``sid`` (a prompt and the steer ``s`` offered to it) made no step: nothing
    stored, nothing taken, none counted; the turn's own first save stores the prompt and
    takes the steer."""
    assert claim.taken is None and (claim.steps, claim.steers_taken) == (0, 0)
    assert await store.messages(sid) == []
    waiting = await store.input(sid, "s")
    assert waiting is not None and waiting.state == "waiting"
    message = claim.prompt.message(steered=False)
    assert _ids(await store.step(claim.lease, [message], at=0, take=16)) == ["s"]


@_case
async def a_first_claim_stores_the_prompt_and_takes_the_steers_offered(store: Both) -> None:
    """The prompt's message at the start, the steers offered to the turn after it (steered,
    in their order), one step counted, the step's events right after ``turn_started``; the
    claim's ``messages`` are the transcript before the step."""
    sid = _sid()
    await store.save(sid, [user("before"), assistant("ok")], at=0)
    await store.enqueue(sid, Input("send", "go", "t"))
    await store.enqueue(sid, Input("steer", "one", "s1"))
    await store.enqueue(sid, Input("steer", "two", "s2"))
    claim = await _claim(store, sid)
    assert (claim.turn, claim.start, claim.resumed) == ("t", 2, False)
    assert [m.text for m in claim.messages] == ["before", "ok"]
    assert _ids(claim.taken) == ["s1", "s2"]
    assert claim.taken is not None and all(m.steered and m.role == "user" for m in claim.taken)
    assert [m.text for m in claim.taken] == ["one", "two"]
    assert (claim.steps, claim.steers_taken) == (1, 2)
    stored = await store.messages(sid)
    assert [m.id for m in stored][2:] == ["t", "s1", "s2"]
    assert stored[2] == claim.prompt.message(steered=False)
    assert stored[3:] == claim.taken
    view = await store.turn(sid, "t")
    assert view is not None and (view.state, view.steps, view.steers_taken) == ("running", 1, 2)
    for id in ("s1", "s2"):
        taken = await store.input(sid, id)
        assert taken is not None and (taken.state, taken.turn, taken.step) == ("taken", "t", 1)
    events = await store.events(sid, after=0, limit=1000)
    kinds = [e.kind for e in events]
    started = kinds.index("turn_started")
    assert kinds[started:] == [
        "turn_started",
        "message",
        "steers_taken",
        "message",
        "message",
        "step",
    ]
    tail = [e.data for e in events[started + 1 :]]
    assert tail[0] == {"position": 2, "id": "t", "role": "user", "steered": False}
    assert tail[1] == {"ids": ["s1", "s2"], "step": 1}
    assert tail[2] == {"position": 3, "id": "s1", "role": "user", "steered": True}
    assert tail[3] == {"position": 4, "id": "s2", "role": "user", "steered": True}
    assert tail[4] == {"step": 1, "length": 5}
    assert all(e.turn == "t" for e in events[started:])
    answer = assistant("done")
    await store.step(claim.lease, [answer], at=5, take=0)
    assert await store.end_turn(claim.lease, Outcome("completed", "done")) is None
    ended = await store.turn(sid, "t")
    assert ended is not None and (ended.state, ended.steps, ended.end) == ("completed", 1, 6)


@_case
async def a_first_claim_takes_no_more_steers_than_the_cap(store: Both) -> None:
    """``cap`` bounds the first step's take as it bounds the turn's: the rest wait, offered."""
    sid = _sid()
    await store.enqueue(sid, Input("send", "go", "t"))
    for n in range(3):
        await store.enqueue(sid, Input("steer", f"s{n}", f"s{n}"))
    claim = await _claim(store, sid, cap=2)
    assert _ids(claim.taken) == ["s0", "s1"] and claim.steers_taken == 2
    assert [m.id for m in await store.messages(sid)] == ["t", "s0", "s1"]
    left = await store.input(sid, "s2")
    assert left is not None and (left.state, left.turn) == ("waiting", "t")
    assert await store.step(claim.lease, [], at=3, take=16) == [], "the cap is reached"


@_case
async def a_first_claim_with_no_steer_waiting_stores_the_prompt(store: Both) -> None:
    """Nothing waits: the prompt alone, one step, no ``steers_taken`` event; a cap of 0 the
    same (a turn that takes no steer still stores its prompt first)."""
    for cap in (16, 0):
        sid = _sid()
        await store.enqueue(sid, Input("send", "go", "t"))
        if cap == 0:
            await store.enqueue(sid, Input("steer", "later", "s"))
        claim = await _claim(store, sid, cap=cap)
        assert claim.taken == [] and (claim.steps, claim.steers_taken) == (1, 0)
        assert [m.id for m in await store.messages(sid)] == ["t"]
        kinds = [e.kind for e in await store.events(sid, after=0, limit=1000)]
        assert kinds[kinds.index("turn_started") :] == ["turn_started", "message", "step"]
        view = await store.turn(sid, "t")
        assert view is not None and view.steps == 1


@_case
async def a_takeover_makes_no_first_step(store: Both) -> None:
    """Claimed again after the lease ran out, the turn is resumed from what is stored: the
    prompt is not stored twice, no steer is taken, no step counted; the old lease is fenced."""
    sid = _sid()
    await store.enqueue(sid, Input("send", "go", "t"))
    first = await _claim(store, sid, seconds=SHORT)
    assert _ids(first.taken) == []
    await store.enqueue(sid, Input("steer", "meanwhile", "s"))
    await asyncio.sleep(WAIT)
    again = await _claim(store, sid, holder="b")
    assert again.resumed and again.taken is None
    assert (again.steps, again.steers_taken, again.previous_holder) == (1, 0, "a")
    assert [m.id for m in again.messages] == ["t"]
    assert [m.id for m in await store.messages(sid)] == ["t"]
    waiting = await store.input(sid, "s")
    assert waiting is not None and waiting.state == "waiting"
    kinds = [e.kind for e in await store.events(sid, after=0, limit=1000)]
    assert kinds[-2:] == ["holder", "turn_started"]
    assert _ids(await store.step(again.lease, [], at=1, take=16)) == ["s"]


@_case
async def a_takeover_of_a_turn_that_stored_nothing_makes_no_step(store: Both) -> None:
    """A turn claimed without ``first`` whose holder died before its first save, taken over
    with ``first``: resumed, nothing stored, nothing taken (the new holder's own first save
    stores the prompt and takes the steers, as a takeover's does)."""
    sid = _sid()
    await store.enqueue(sid, Input("send", "go", "t"))
    await store.enqueue(sid, Input("steer", "one", "s"))
    gone = await store.claim("a", seconds=SHORT, cap=16, session=sid)
    assert gone is not None and gone.taken is None
    await asyncio.sleep(WAIT)
    again = await _claim(store, sid, holder="b")
    assert again.resumed
    await _made_no_step(store, sid, again)


@_case
async def a_claim_without_first_makes_no_step(store: Both) -> None:
    """The default claim stores nothing: the turn's first save is its own call."""
    sid = _sid()
    await store.enqueue(sid, Input("send", "go", "t"))
    await store.enqueue(sid, Input("steer", "one", "s"))
    claim = await store.claim("a", seconds=LONG, cap=16, session=sid)
    assert claim is not None
    await _made_no_step(store, sid, claim)


@_case
async def a_first_claim_of_any_session_makes_the_step_too(store: Both) -> None:
    """Unnamed (the claim finds the session), a first claim makes the same step."""
    sid = _sid()
    await store.enqueue(sid, Input("send", "go", "t"))
    await store.enqueue(sid, Input("steer", "one", "s"))
    found = None
    for _ in range(50):  # other cases' sessions may be claimable too: claim until ours
        claim = await store.claim("any", seconds=LONG, cap=16, first=True)
        if claim is None:
            break
        if claim.lease.session == sid:
            found = claim
            break
    assert found is not None, "the session was never claimed"
    assert _ids(found.taken) == ["s"]
    assert [m.id for m in await store.messages(sid)] == ["t", "s"]


@_case
async def a_first_claim_leaves_out_what_the_claimer_knows(store: Both) -> None:
    """With ``known``, ``messages`` still starts at the known length and ends before the
    step; the step appends, so the mark stays."""
    sid = _sid()
    await store.enqueue(sid, Input("send", "one", "t1"))
    one = await _claim(store, sid)
    await store.end_turn(one.lease, Outcome("completed", "re"), last=[assistant("re")], at=1)
    await store.enqueue(sid, Input("send", "two", "t2"))
    await store.enqueue(sid, Input("steer", "and", "s"))
    two = await _claim(store, sid, known={sid: Known(1, one.mark)})
    assert two.mark == one.mark and two.known == 1
    assert [m.text for m in two.messages] == ["re"]
    assert _ids(two.taken) == ["s"] and two.start == 2
    assert [m.id for m in await store.messages(sid)][2:] == ["t2", "s"]
    await store.enqueue(sid, Input("send", "three", "t3"))
    await store.end_turn(two.lease, Outcome("completed", "ok"), last=[assistant("ok")], at=4)
    three = await _claim(store, sid, known={sid: Known(5, two.mark)})
    assert (three.known, three.messages, three.mark) == (5, [], one.mark)


@_case
async def a_first_claim_whose_prompt_id_is_stored_makes_no_step(store: Both) -> None:
    """A prompt whose id is already a message of the transcript: the claim is made without
    the step (nothing stored, nothing taken), so the turn is claimed and fails on its own
    first save rather than the claim failing every time."""
    sid = _sid()
    await store.save(sid, [user("already", id="t")], at=0)
    await store.enqueue(sid, Input("send", "go", "t"))
    await store.enqueue(sid, Input("steer", "one", "s"))
    claim = await _claim(store, sid)
    assert claim.taken is None and (claim.steps, claim.steers_taken) == (0, 0)
    assert [m.id for m in await store.messages(sid)] == ["t"]
    waiting = await store.input(sid, "s")
    assert waiting is not None and waiting.state == "waiting"


@_case
async def a_first_claim_takes_a_steer_already_stored_without_storing_it_again(
    store: Both,
) -> None:
    """A steer whose id a plain save already stored in the transcript is taken at the first
    step (counted, its input taken) but not recorded again, as ``step`` does."""
    sid = _sid()
    await store.enqueue(sid, Input("send", "go", "t"))
    await store.enqueue(sid, Input("steer", "one", "s"))
    await store.save(sid, [user("one", id="s")], at=0)
    claim = await _claim(store, sid)
    assert claim.start == 1 and claim.taken == [] and claim.steers_taken == 1
    assert [m.id for m in await store.messages(sid)] == ["s", "t"]
    taken = await store.input(sid, "s")
    assert taken is not None and (taken.state, taken.step) == ("taken", 1)
