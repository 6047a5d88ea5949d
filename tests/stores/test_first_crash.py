"""A process SIGKILLed while its claims make turns' first steps leaves each claim whole.

``ops_worker.py first`` sends a prompt and two steers offered to its turn, claims the turn
with ``first=True`` (the prompt stored, both steers taken, one step counted, in the claim's
own atomic operation), then ends it with its answer; the test kills it at a random moment,
many times, aimed at the claim, then reads every session it touched. A session is as before
the claim (queued, nothing stored, the steers waiting) or as after it (running, the prompt
and both steers stored once, each steer taken at step 1, the step's events): never a turn
claimed without its step, a step without its claim, or a steer taken and not stored.

Every store that runs in a process of its own (SQLite, Postgres, MySQL/MariaDB, MongoDB),
through the crash tests' shared ``store_url`` fixture.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.stores.test_rewrite_crash import killed_rounds, store_url

__all__ = ["store_url"]  # the fixture, used by name

State = tuple[tuple[str, ...], str | None, int | None, tuple[str | None, ...], tuple[str, ...]]

_INPUTS = ("input",) * 3
_CLAIMED = (*_INPUTS, "turn_started", "message", "steers_taken", "message", "message", "step")
_AFTER: dict[int | None, State] = {
    None: ((), None, None, (None, None), ()),
    0: ((), "queued", 0, (None, None), ("input",)),
    1: ((), "queued", 0, ("waiting", None), ("input",) * 2),
    2: ((), "queued", 0, ("waiting", "waiting"), _INPUTS),
    3: (("p", "s1", "s2"), "running", 1, ("taken", "taken"), _CLAIMED),
    4: (
        ("p", "s1", "s2", "d"),
        "completed",
        1,
        ("taken", "taken"),
        (*_CLAIMED, "message", "turn_ended"),
    ),
}


async def _state(store: Any, sid: str) -> State:
    ids = tuple(m.id for m in await store.messages(sid))
    turn = await store.turn(sid, "p")
    steers = []
    for id in ("s1", "s2"):
        view = await store.input(sid, id)
        steers.append(None if view is None else view.state)
        if view is not None and view.state == "taken":
            assert view.step == 1, f"{sid}: {id} taken at step {view.step}"
    events = tuple(e.kind for e in await store.events(sid, after=0, limit=100))
    if turn is None:
        return ids, None, None, tuple(steers), events
    assert turn.steers_taken == sum(s == "taken" for s in steers), f"{sid}: {turn}"
    return ids, turn.state, turn.steps, tuple(steers), events


@pytest.mark.slow
async def test_a_kill_mid_first_claim_leaves_it_whole_or_not_made(store_url: str) -> None:
    await killed_rounds(store_url, "first", (2,), _AFTER, _state)  # after op 2: the claim next
