"""The service contract's cases of a claim that leaves out what the claimer knows.

A claim returns the transcript's ``mark``; a claimer that passes ``known={session:
Known(length, mark)}`` gets only the messages after ``length`` while the mark is still the
session's (writes that only append keep it), and the whole transcript once anything cut,
changed, deleted or forked into the session (:mod:`steerable.service_store`). A store
that got this wrong would hand a replica a transcript that is not the stored one, so each
way a mark must change has its case.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from steerable.messages import Message, assistant, new_id, user
from steerable.service_store import Claim, Input, Known, Outcome
from steerable.store import Forkable, Repairable, Rewritable
from steerable.testing.abilities import needs
from steerable.testing.service_cases import LONG, Both

SERVICE_CASES: list[Callable[..., Coroutine[Any, Any, None]]] = []
"""The cases, in the order they run; they join the service contract."""


def _case(*abilities: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def add(case: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., Any]:
        SERVICE_CASES.append(case)
        return needs(*abilities)(case) if abilities else case

    return add


def _sid() -> str:
    return f"known-{new_id()}"


async def _turn(store: Both, sid: str, text: str, known: Known | None = None) -> Claim:
    """A whole turn of ``text``: claimed (knowing ``known``), prompt and answer saved, ended.
    Returns its claim."""
    await store.enqueue(sid, Input("send", text))
    claim = await store.claim(
        "a", seconds=LONG, cap=16, session=sid, known=None if known is None else {sid: known}
    )
    assert claim is not None, f"nothing to claim in {sid}"
    at = claim.known + len(claim.messages)
    await store.step(claim.lease, [claim.prompt.message(steered=False)], at=at, take=16)
    await store.step(claim.lease, [assistant(f"re: {text}")], at=at + 1, take=0)
    await store.end_turn(claim.lease, Outcome("completed", f"re: {text}"))
    return claim


async def _claim(store: Both, sid: str, known: Known | None) -> Claim:
    claim = await store.claim(
        "b", seconds=LONG, cap=16, session=sid, known=None if known is None else {sid: known}
    )
    assert claim is not None, f"nothing to claim in {sid}"
    return claim


def _texts(messages: list[Message]) -> list[str]:
    return [m.text for m in messages]


@_case()
async def a_claim_leaves_out_the_messages_the_claimer_knows(store: Both) -> None:
    """Under the same mark a claim returns only what came after the known length, however it
    was appended: by turns, or by a plain save."""
    sid = _sid()
    first = await _turn(store, sid, "one")
    assert first.known == 0 and first.messages == [] and first.mark
    second = await _turn(store, sid, "two", Known(2, first.mark))
    assert second.mark == first.mark, "appending keeps the mark"
    assert (second.known, second.messages) == (2, [])
    await store.save(sid, [user("aside")], at=4)
    await store.enqueue(sid, Input("send", "three"))
    third = await _claim(store, sid, Known(3, first.mark))
    assert third.mark == first.mark and third.known == 3
    assert _texts(third.messages) == ["re: two", "aside"]
    assert third.start == 5, "the turn still starts after the whole stored transcript"


@_case()
async def a_claim_knowing_nothing_useful_returns_the_whole_transcript(store: Both) -> None:
    """No known entry, another session's, a wrong mark, a length past the stored one or 0:
    the whole transcript, ``known`` 0."""
    sid = _sid()
    first = await _turn(store, sid, "one")
    whole = ["one", "re: one"]
    for known in (
        None,
        Known(2, "not-the-mark"),
        Known(3, first.mark),
        Known(0, first.mark),
    ):
        await store.enqueue(sid, Input("send", f"again {known}"))
        claim = await _claim(store, sid, known)
        assert (claim.known, _texts(claim.messages)) == (0, whole), known
        await store.end_turn(claim.lease, Outcome("completed"))
    await store.enqueue(sid, Input("send", "other"))
    other = await store.claim(
        "b", seconds=LONG, cap=16, session=sid, known={_sid(): Known(2, first.mark)}
    )
    assert other is not None and (other.known, _texts(other.messages)) == (0, whole)


@_case()
async def a_claim_of_any_session_uses_what_the_claimer_knows_of_it(store: Both) -> None:
    """A claim naming no session leaves out what ``known`` says of the one it claims."""
    sid = _sid()
    first = await _turn(store, sid, "one")
    await store.enqueue(sid, Input("send", "two"))
    known = {sid: Known(1, first.mark), _sid(): Known(5, "elsewhere")}
    for _ in range(1000):  # other cases' sessions in a shared database may come first
        found = await store.claim("scanner", seconds=LONG, cap=16, known=known)
        assert found is not None, "the session with work was not found"
        if found.lease.session == sid:
            claim = found
            break
    assert (claim.known, _texts(claim.messages), claim.mark) == (1, ["re: one"], first.mark)


@_case("rewritable")
async def a_cut_gives_the_transcript_a_new_mark(store: Both) -> None:
    """After ``truncate`` the old mark no longer holds, even where the length still fits."""
    sid = _sid()
    first = await _turn(store, sid, "one")
    await _turn(store, sid, "two", Known(2, first.mark))
    assert isinstance(store, Rewritable)
    await store.truncate(sid, at=3)
    await store.save(sid, [assistant("other answer")], at=3)
    await store.enqueue(sid, Input("send", "three"))
    claim = await _claim(store, sid, Known(4, first.mark))
    assert claim.mark != first.mark and claim.known == 0
    assert _texts(claim.messages) == ["one", "re: one", "two", "other answer"]


@_case("repairable")
async def a_replace_gives_the_transcript_a_new_mark(store: Both) -> None:
    """A ``replace`` that keeps the ids and the length but changes the text: a new mark."""
    sid = _sid()
    first = await _turn(store, sid, "one")
    assert isinstance(store, Repairable)
    stored = await store.messages(sid)
    changed = assistant("changed", id=stored[1].id)
    await store.replace(sid, at=1, old=[stored[1].id], messages=[changed])
    await store.enqueue(sid, Input("send", "two"))
    claim = await _claim(store, sid, Known(2, first.mark))
    assert claim.mark != first.mark and claim.known == 0
    assert _texts(claim.messages) == ["one", "changed"]


@_case("rewritable")
async def a_deleted_session_begun_again_has_a_new_mark(store: Both) -> None:
    """A session deleted and used again is another transcript, even at the same length."""
    sid = _sid()
    first = await _turn(store, sid, "one")
    assert isinstance(store, Rewritable)
    assert await store.delete(sid) is True
    again = await _turn(store, sid, "uno")
    assert again.mark != first.mark and again.known == 0
    await store.enqueue(sid, Input("send", "dos"))
    claim = await _claim(store, sid, Known(2, first.mark))
    assert claim.known == 0 and _texts(claim.messages) == ["uno", "re: uno"]


@_case("rewritable", "forkable")
async def a_session_forked_into_after_a_delete_has_a_new_mark(store: Both) -> None:
    """A fork into a deleted session's id is a new transcript: the old mark never holds."""
    sid, source = _sid(), _sid()
    first = await _turn(store, sid, "one")
    await _turn(store, source, "copied")
    assert isinstance(store, Rewritable) and isinstance(store, Forkable)
    assert await store.delete(sid) is True
    assert await store.fork(source, sid) == 2
    await store.enqueue(sid, Input("send", "two"))
    claim = await _claim(store, sid, Known(2, first.mark))
    assert claim.mark != first.mark and claim.known == 0
    assert _texts(claim.messages) == ["copied", "re: copied"]
