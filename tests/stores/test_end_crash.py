"""A process SIGKILLed while it ends turns with their answers leaves each turn whole.

``ops_worker.py end`` sends a prompt, claims it, saves it at the turn's first step, then
ends the turn with its last three messages (``end_turn(last=..., at=1)``); the test kills
it at a random moment, many times, aimed at the end, then reads every session it touched.
A turn is ended with its answer stored, or still running with no answer: never ended
without its answer, nor its answer stored (or its events logged) by a turn that runs on.

Every store that runs in a process of its own (SQLite, Postgres, MySQL/MariaDB, MongoDB),
through the crash tests' shared ``store_url`` fixture.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.stores.test_rewrite_crash import killed_rounds, store_url

__all__ = ["store_url"]  # the fixture, used by name

State = tuple[int, str | None, int | None, tuple[str, ...]]

_AFTER: dict[int | None, State] = {
    None: (0, None, None, ()),
    0: (0, "queued", None, ("input",)),
    1: (0, "running", None, ("input", "turn_started")),
    2: (1, "running", None, ("input", "turn_started", "message", "step")),
    3: (
        4,
        "completed",
        4,
        ("input", "turn_started", "message", "step", "message", "message", "message", "turn_ended"),
    ),
}


async def _state(store: Any, sid: str) -> State:
    messages = await store.messages(sid)
    turn = await store.turn(sid, "p")
    events = tuple(e.kind for e in await store.events(sid, after=0, limit=100))
    if turn is None:
        return len(messages), None, None, events
    return len(messages), turn.state, turn.end, events


@pytest.mark.slow
async def test_a_kill_mid_end_leaves_each_turn_ended_with_its_answer_or_running(
    store_url: str,
) -> None:
    await killed_rounds(store_url, "end", (2,), _AFTER, _state)
