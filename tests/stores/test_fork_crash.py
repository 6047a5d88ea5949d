"""A process SIGKILLed while it forks sessions leaves each fork whole or absent.

``ops_worker.py fork`` saves 300 messages to a session, forks it through its 200th message, then
forks all of it; the test kills it at a random moment, many times, aimed at the forks, then
reads every session it touched: each fork holds all its messages or none, never a part.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.stores.test_rewrite_crash import killed_rounds, store_url

__all__ = ["store_url"]  # the fixture, used by name

_AFTER: dict[int | None, tuple[int, int, int]] = {
    None: (0, 0, 0),
    0: (300, 0, 0),
    1: (300, 200, 0),
    2: (300, 200, 300),
}


async def _state(store: Any, sid: str) -> tuple[int, int, int]:
    old = await store.messages(sid)
    a, b = await store.messages(f"{sid}/a"), await store.messages(f"{sid}/b")
    assert a == old[: len(a)] and b == old[: len(b)], f"{sid}: a fork is not a prefix"
    return len(old), len(a), len(b)


@pytest.mark.slow
async def test_a_kill_mid_fork_leaves_each_fork_whole_or_absent(store_url: str) -> None:
    await killed_rounds(store_url, "fork", (0, 1), _AFTER, _state)
