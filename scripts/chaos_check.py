"""The check of scripts/chaos.py: every promise of the service, read from the store alone.

Every acknowledged input is answered exactly once (the prompt of one turn, or taken by one),
in order; no turn is recorded twice; every transcript is valid. :func:`verify` reads each
session back and returns the :class:`Findings`.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from steerable.messages import Message, transcript_problems
from steerable.service_store import (
    END_STATES,
    Entry,
    InputView,
    ServiceEvent,
    ServiceStore,
    TurnView,
)
from steerable.stores.url import open_url


@dataclass
class Findings:
    """What the check counted, and every violation found (with the session it is in)."""

    strict: bool = True  # the demo agent never fails: every turn completes (no outage)
    violations: list[str] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    states: Counter[str] = field(default_factory=Counter)

    def fail(self, session: str, what: str) -> None:
        """Record a violation."""
        self.violations.append(f"{session}: {what}")


@dataclass
class Recorded:
    """One session as the store has it: events, inputs by seq, turns and the transcript."""

    events: list[ServiceEvent]
    inputs: list[InputView]
    offered: dict[str, str | None]  # input id -> the turn its input event offered it to
    turns: dict[str, TurnView]
    order: list[str]  # turn ids by their first turn_started event
    transcript: list[Entry]


async def _read(store: ServiceStore, session: str) -> Recorded:
    events: list[ServiceEvent] = []
    while batch := await store.events(session, after=events[-1].id if events else 0, limit=500):
        events += batch
    entries: list[Entry] = []
    while page := await store.transcript(
        session, after=entries[-1].position if entries else -1, limit=500
    ):
        entries += page
    offered = {e.data["id"]: e.data["turn"] for e in events if e.kind == "input"}
    views = await asyncio.gather(*(store.input(session, id) for id in offered))
    inputs = sorted((v for v in views if v is not None), key=lambda v: v.seq)
    started = [e.turn for e in events if e.kind == "turn_started" and e.turn is not None]
    order = list(dict.fromkeys(started))
    turns = {t: v for t in order if (v := await store.turn(session, t)) is not None}
    return Recorded(events, inputs, offered, turns, order, entries)


def _check_session(session: str, r: Recorded, acks: list[dict[str, Any]], f: Findings) -> None:
    """Every promise the store must show for ``session``; violations go to ``f``."""

    def fail(what: str) -> None:
        f.fail(session, what)

    by_id = {v.id: v for v in r.inputs}
    if len(by_id) != len(r.offered) or len(r.offered) != sum(e.kind == "input" for e in r.events):
        fail("an input id has more than one input event, or an input event has no input")
    if [v.seq for v in r.inputs] != list(range(1, len(r.inputs) + 1)):
        fail(f"the inputs' seqs are not 1..n: {[v.seq for v in r.inputs][:20]}")
    for ack in acks:
        view = by_id.get(ack["id"])
        if view is None:
            fail(f"acknowledged input {ack['id']} is not in the store")
        elif (view.seq, view.kind, r.offered[view.id]) != (ack["seq"], ack["kind"], ack["turn"]):
            fail(f"input {view.id}: acknowledged {ack} but stored {view} / {r.offered[view.id]}")
    _check_fates(session, r, by_id, f)
    _check_transcript(session, r, by_id, f)
    _check_turns(session, r, by_id, f)
    _check_order(session, r, f)


def _check_fates(session: str, r: Recorded, by_id: dict[str, InputView], f: Findings) -> None:
    for v in r.inputs:
        f.counts[f"{v.kind}_{v.state}"] += 1
        if v.state == "waiting":
            f.fail(session, f"input {v.id} still waits after the drain")
        elif v.state == "prompt" and (v.turn != v.id or v.id not in r.turns):
            f.fail(session, f"input {v.id} is a prompt of {v.turn!r}, with turn {v.id in r.turns}")
        elif v.state == "taken":
            taker = by_id.get(v.turn or "")
            if v.kind != "steer" or taker is None or v.turn not in r.turns:
                f.fail(session, f"input {v.id} ({v.kind}) taken by unknown turn {v.turn!r}")
            elif r.offered[v.id] != v.turn:
                f.fail(session, f"steer {v.id} taken by {v.turn} but offered to {r.offered[v.id]}")
            elif taker.seq > v.seq:
                f.fail(session, f"steer {v.id} taken by turn {v.turn}, whose prompt came after")
        if v.state == "prompt" and r.offered[v.id] is not None:
            f.counts["steers_freed"] += 1


def _check_transcript(session: str, r: Recorded, by_id: dict[str, InputView], f: Findings) -> None:
    messages: list[Message] = [e.message for e in r.transcript]
    if [e.position for e in r.transcript] != list(range(len(messages))):
        f.fail(session, "the transcript's positions are not 0..n-1")
    for problem in transcript_problems(messages):
        f.fail(session, f"invalid transcript: {problem}")
    seen = Counter(m.id for m in messages)
    for v in r.inputs:
        if seen[v.id] != 1:
            f.fail(
                session, f"input {v.id} ({v.state}) appears {seen[v.id]} times in the transcript"
            )
    for e in r.transcript:
        m = e.message
        if m.role != "user" or m.tool_results:
            continue
        found = by_id.get(m.id)
        if found is None:
            f.fail(session, f"user message {m.id} at {e.position} is no input")
            continue
        v = found
        if m.steered != (v.state == "taken") or e.turn != v.turn or m.text != f"{v.kind} {v.id}":
            f.fail(session, f"input {v.id} ({v.state} by {v.turn}) recorded as {m} of {e.turn}")


def _check_turns(session: str, r: Recorded, by_id: dict[str, InputView], f: Findings) -> None:
    ended = Counter(e.turn for e in r.events if e.kind == "turn_ended")
    fresh = Counter(e.turn for e in r.events if e.kind == "turn_started" and not e.data["resumed"])
    taken_events = Counter(i for e in r.events if e.kind == "steers_taken" for i in e.data["ids"])
    f.counts["takeovers"] += sum(e.kind == "turn_started" and e.data["resumed"] for e in r.events)
    for id, n in taken_events.items():
        if n != 1 or by_id.get(id) is None or by_id[id].state != "taken":
            f.fail(session, f"steer {id} is in {n} steers_taken events ({by_id.get(id)})")
    for t in r.order:
        view = r.turns.get(t)
        f.counts["turns"] += 1
        f.states[view.state if view else "missing"] += 1
        if view is None or view.state not in END_STATES:
            f.fail(session, f"turn {t} did not end: {view}")
        elif f.strict and view.state != "completed":
            f.fail(session, f"turn {t} ended {view.state} ({view.error}) with no outage")
        if ended[t] != 1 or fresh[t] != 1:
            f.fail(session, f"turn {t}: {fresh[t]} fresh starts, {ended[t]} turn_ended events")
        took = [v for v in r.inputs if v.state == "taken" and v.turn == t]
        f.counts["steers_taken"] += len(took)
        if view is not None and view.steers_taken != len(took):
            f.fail(session, f"turn {t} counts {view.steers_taken} steers taken, not {len(took)}")
        if view is not None and view.state == "completed":
            _check_answer(session, r, t, f)
    if set(ended) - set(r.order):
        f.fail(session, f"turn_ended events of turns never started: {set(ended) - set(r.order)}")


def _check_answer(session: str, r: Recorded, turn: str, f: Findings) -> None:
    """A completed turn ends with the demo's answer: every user text of the turn, in order."""
    mine = [e.message for e in r.transcript if e.turn == turn]
    heard = [m.text for m in mine if m.role == "user" and m.text]
    last = mine[-1] if mine else None
    want = "answered: " + " | ".join(heard)
    if last is None or last.role != "assistant" or last.text != want:
        f.fail(session, f"turn {turn} completed, but ends {last} instead of {want!r}")


def _check_order(session: str, r: Recorded, f: Findings) -> None:
    """Turns start in their prompts' order, and nothing is answered after a later prompt.

    Walking the inputs by seq, every input before a prompt ``p`` must be answered by a turn
    that started before ``p``'s: a steer may only jump ahead when the running turn took it.
    """
    index = {t: n for n, t in enumerate(r.order)}
    prompts = [v.id for v in r.inputs if v.state == "prompt"]  # by seq
    if prompts != [t for t in r.order if t in set(prompts)]:
        f.fail(session, "the turns did not start in the order of their prompts' seq")
    starts = [r.turns[t].start for t in r.order if t in r.turns]
    if any(b is not None and a is not None and b < a for a, b in itertools.pairwise(starts)):
        f.fail(session, f"the turns' starts go backwards: {starts}")
    latest = -1
    for v in r.inputs:
        at = index.get(v.turn or "", -1)
        if v.state == "prompt" and latest >= at:
            f.fail(
                session, f"prompt {v.id} (turn {at}) ran before an earlier input (turn {latest})"
            )
        latest = max(latest, at)
    positions = {e.message.id: e.position for e in r.transcript}
    for t in r.order:
        took = [v for v in r.inputs if v.state == "taken" and v.turn == t]
        where = [(v.step, positions.get(v.id, -1)) for v in took]
        if where != sorted(where):
            f.fail(session, f"turn {t} took its steers out of order: {where}")


async def verify(
    url: str, sessions: list[str], acks: list[dict[str, Any]], *, strict: bool
) -> Findings:
    """Check every session from the store alone (and the acknowledgements against it).

    ``strict``: no outage happened, so every turn must have completed (the demo agent never
    fails; a turn that failed ran into something like a write refused as stale).
    """
    findings = Findings(strict)
    mine: dict[str, list[dict[str, Any]]] = {s: [] for s in sessions}
    for ack in acks:
        if "failed" not in ack:
            mine[ack["session"]].append(ack)
    async with open_url(url) as store:
        for session in sessions:
            recorded = await _read(store, session)
            _check_session(session, recorded, mine[session], findings)
            findings.counts["inputs_stored"] += len(recorded.inputs)
    return findings
