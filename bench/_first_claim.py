"""The rounds ``bench.mysql_first`` and ``bench.mongodb_first`` share: three new sessions a
round, each with one send waiting (and ``steers`` steers offered to it), claimed in a
rotating order as a claim alone, a claim then ``step(lease, [prompt's message],
at=start, take=cap)``, and ``claim(..., first=True)``; each timed from the claim's call to its
last answer, and what it sent counted by the caller's ``count``."""

from __future__ import annotations

import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from steerable.messages import new_id
from steerable.service_store import Input

KINDS = ("claim", "claim + step", "claim(first=True)")


async def _one(store: Any, kind: str, session: str) -> None:
    claim = await store.claim("bench", seconds=60, cap=16, session=session, first=kind == KINDS[2])
    assert claim is not None
    if kind == KINDS[1]:
        message = claim.prompt.message(steered=False)
        await store.step(claim.lease, [message], at=claim.start, take=claim.cap)


async def run_rounds(
    store: Any, rounds: int, steers: int, count: Callable[[], Awaitable[int]], *, overhead: int = 0
) -> list[str]:
    """The rounds on ``store``; a line per kind: its median, the ratio to the claim alone and
    what ``count`` counted it sending (less ``overhead``: ``count``'s own)."""
    times: dict[str, list[float]] = {kind: [] for kind in KINDS}
    sent: dict[str, int] = {}
    for round in range(rounds):
        order = KINDS[round % 3 :] + KINDS[: round % 3]
        for kind in order:
            session = f"bench-{new_id()}"
            await store.enqueue(session, Input("send", "go"))
            for _ in range(steers):
                await store.enqueue(session, Input("steer", "and"))
            before = await count()
            started = time.perf_counter()
            await _one(store, kind, session)
            times[kind].append(time.perf_counter() - started)
            sent[kind] = await count() - before - overhead
    alone = statistics.median(times[KINDS[0]])
    lines = []
    for kind in KINDS:
        median = statistics.median(times[kind])
        lines.append(
            f"steers {steers}  {kind:18s} {median * 1e3:6.2f} ms"
            f"  {median / alone:4.2f}x  sent {sent[kind]}"
        )
    return lines
