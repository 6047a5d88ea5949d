"""A process SIGKILLed while it cancels inputs and sets metadata leaves each session whole.

``ops_worker.py queue`` queues a send and two steers offered to it, sets the session's
metadata, cancels the send (which frees the two steers) and sets the metadata again; the
test kills it at a random moment, many times, aimed at the cancel and the second metadata,
then reads every session it touched. A session must look exactly as after its last
reported op, or as after the next one: never half a cancel (the send cancelled and a steer
still offered to it, or no event saying so) nor a metadata half written.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.stores.test_rewrite_crash import killed_rounds, store_url

__all__ = ["store_url"]  # the fixture, used by name

State = tuple[tuple[tuple[str, str, str | None], ...], object, tuple[tuple[str, ...], ...]]

_W, _H = "waiting", "h"
_AFTER: dict[int | None, State] = {
    None: ((), None, ()),
    0: ((("h", _W, None),), None, ()),
    1: ((("h", _W, None), ("s1", _W, _H)), None, ()),
    2: ((("h", _W, None), ("s1", _W, _H), ("s2", _W, _H)), None, ()),
    3: ((("h", _W, None), ("s1", _W, _H), ("s2", _W, _H)), 1, ()),
    4: ((("h", "cancelled", None), ("s1", _W, None), ("s2", _W, None)), 1, (("s1", "s2"),)),
    5: ((("h", "cancelled", None), ("s1", _W, None), ("s2", _W, None)), 2, (("s1", "s2"),)),
}


async def _state(store: Any, sid: str) -> State:
    inputs = tuple((v.id, v.state, v.turn) for v in await store.inputs(sid, after=0, limit=10))
    metadata = (await store.status(sid)).metadata
    version = metadata.get("v") if metadata else None
    events = await store.events(sid, after=0, limit=100)
    released = tuple(tuple(e.data["released"]) for e in events if e.kind == "cancelled")
    return inputs, version, released


@pytest.mark.slow
async def test_a_kill_mid_cancel_or_metadata_leaves_each_session_whole(store_url: str) -> None:
    await killed_rounds(store_url, "queue", (3, 4), _AFTER, _state)
