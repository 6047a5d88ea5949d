"""A process SIGKILLed while it swaps transcript tails and writes the tool journal leaves
each session as after one of its ops: never half a swap, never half a journal entry.

``ops_worker.py repair`` saves 200 messages, swaps the last 100 for 200 others, begins a
call in the journal, ends it, then swaps the tail from 50 on for nothing; the test kills it
at random moments aimed at the swaps, many times, on each store, then reads every session.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.stores.test_rewrite_crash import killed_rounds, store_url

__all__ = ["store_url"]  # the fixture, used by name

# messages stored, the id at position 100 (None: fewer), the journal's state of call k0
_AFTER: dict[int | None, tuple[int, str | None, str]] = {
    None: (0, None, "absent"),
    0: (200, "m100", "absent"),
    1: (300, "r100", "absent"),
    2: (300, "r100", "started"),
    3: (300, "r100", "ended"),
    4: (50, None, "ended"),
}


async def _state(store: Any, sid: str) -> tuple[int, str | None, str]:
    messages = await store.messages(sid)
    for position, message in enumerate(messages):  # each message whole, in its place
        if message.id.startswith("m"):
            assert (message.id, message.text) == (f"m{position}", f"m{position}"), sid
        else:
            assert (message.id, message.text) == (f"r{position}", f"r{position}" * 200), sid
    known = await store.begin_calls(sid, ["k0"])  # (marks it started when absent: read once)
    journal = "absent" if "k0" not in known else "started" if known["k0"] is None else "ended"
    return len(messages), messages[100].id if len(messages) > 100 else None, journal


@pytest.mark.slow
async def test_a_kill_mid_swap_or_journal_write_leaves_each_session_whole(store_url: str) -> None:
    await killed_rounds(store_url, "repair", (0, 3), _AFTER, _state)
