"""The service contract's cases of a turn's end that carries the turn's last save.

``end_turn(lease, outcome, last=messages, at=n)`` appends ``messages`` at ``n`` as a final
step would (no step counted, no steer taken, their ``message`` events) and ends the turn,
in one atomic operation: refused whole together, so a turn is never ended without its
answer nor its answer stored by a turn that did not end (:mod:`steerable.service_store`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from steerable.errors import Fenced, InvalidMessage, TranscriptConflict
from steerable.messages import assistant, new_id
from steerable.service_store import Claim, Input, Outcome
from steerable.testing.service_cases import LONG, SHORT, WAIT, Both

SERVICE_CASES: list[Callable[..., Coroutine[Any, Any, None]]] = []
"""The cases, in the order they run; they join the service contract."""


def _case(case: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., Any]:
    SERVICE_CASES.append(case)
    return case


def _sid() -> str:
    return f"end-{new_id()}"


async def _begun(store: Both, sid: str, *, holder: str = "a", seconds: float = LONG) -> Claim:
    """A turn claimed, its prompt saved at its first step."""
    await store.enqueue(sid, Input("send", "go", "t"))
    claim = await store.claim(holder, seconds=seconds, cap=16, session=sid)
    assert claim is not None
    await store.step(claim.lease, [claim.prompt.message(steered=False)], at=0, take=16)
    return claim


@_case
async def an_end_with_its_last_messages_saves_them_and_ends_at_once(store: Both) -> None:
    """The answer is stored after the prompt, no step counted, its ``message`` event just
    before ``turn_ended``; the turn ends where the answer ends."""

    sid = _sid()
    claim = await _begun(store, sid)
    before = (await store.events(sid, after=0, limit=1000))[-1].id
    answer = assistant("done")
    following = await store.end_turn(claim.lease, Outcome("completed", "done"), last=[answer], at=1)
    assert following is None
    assert [m.id for m in await store.messages(sid)] == ["t", answer.id]
    view = await store.turn(sid, "t")
    assert view is not None and (view.state, view.steps, view.end) == ("completed", 1, 2)
    events = await store.events(sid, after=before, limit=1000)
    assert [(e.id, e.kind) for e in events] == [(before + 1, "message"), (before + 2, "turn_ended")]
    assert events[0].data == {"position": 1, "id": answer.id, "role": "assistant", "steered": False}
    assert (await store.status(sid)).turn is None


@_case
async def an_end_whose_last_save_conflicts_ends_nothing(store: Both) -> None:
    """A wrong position refuses the save and the end whole: the turn still runs, and a right
    end then goes through."""
    sid = _sid()
    claim = await _begun(store, sid)
    before = await store.events(sid, after=0, limit=1000)
    with pytest.raises(TranscriptConflict):
        await store.end_turn(claim.lease, Outcome("completed"), last=[assistant("x")], at=5)
    assert [m.id for m in await store.messages(sid)] == ["t"]
    assert await store.events(sid, after=0, limit=1000) == before
    status = await store.status(sid)
    assert status.turn is not None and status.turn.state == "running"
    await store.end_turn(claim.lease, Outcome("completed", "y"), last=[assistant("y")], at=1)
    assert [m.text for m in await store.messages(sid)] == ["go", "y"]


@_case
async def an_end_whose_last_save_repeats_an_id_ends_nothing(store: Both) -> None:
    """A message id already stored refuses the save and the end whole."""
    sid = _sid()
    claim = await _begun(store, sid)
    with pytest.raises(InvalidMessage):
        await store.end_turn(
            claim.lease, Outcome("completed"), last=[assistant("again", id="t")], at=1
        )
    status = await store.status(sid)
    assert status.turn is not None and [m.id for m in await store.messages(sid)] == ["t"]


@_case
async def a_stale_end_saves_nothing_and_ends_nothing(store: Both) -> None:
    """After another claimer took the turn over, the old holder's end and save are refused."""
    sid = _sid()
    old = await _begun(store, sid, seconds=SHORT)
    await asyncio.sleep(WAIT)
    new = await store.claim("b", seconds=LONG, cap=16, session=sid)
    assert new is not None and new.resumed
    with pytest.raises(Fenced):
        await store.end_turn(old.lease, Outcome("completed"), last=[assistant("late")], at=1)
    assert [m.id for m in await store.messages(sid)] == ["t"]
    status = await store.status(sid)
    assert status.turn is not None and status.turn.holder == "b"


@_case
async def the_last_save_of_an_end_takes_no_steer(store: Both) -> None:
    """A steer offered to the turn is not taken by its last save: it is released, the next
    turn's prompt."""
    sid = _sid()
    claim = await _begun(store, sid)
    await store.enqueue(sid, Input("steer", "late", "s"))
    following = await store.end_turn(
        claim.lease, Outcome("completed", "done"), last=[assistant("done")], at=1
    )
    assert following == "s"
    assert [m.text for m in await store.messages(sid)] == ["go", "done"]
    ended = [e for e in await store.events(sid, after=0, limit=1000) if e.kind == "turn_ended"]
    assert ended[-1].data["released"] == ["s"]
    steer = await store.input(sid, "s")
    assert steer is not None and (steer.state, steer.turn) == ("waiting", None)
