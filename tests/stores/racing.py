"""Processes racing at a barrier: what the store tests that race real processes share."""

from __future__ import annotations

import asyncio
import multiprocessing
from collections.abc import Callable, Sequence
from typing import Any


async def race(target: Callable[..., None], args: Sequence[tuple[Any, ...]]) -> list[Any]:
    """Run ``target(*a, together, out)`` in a spawned process per ``a`` of ``args``, all
    released at once by the barrier ``together``; each puts one answer on the queue ``out``
    (a tuple, or what went wrong). The answers, in the order they came; a process still
    alive at the end is killed."""
    context = multiprocessing.get_context("spawn")
    out, together = context.Queue(), context.Barrier(len(args))
    workers = [context.Process(target=target, args=(*a, together, out)) for a in args]
    loop = asyncio.get_running_loop()
    for worker in workers:
        worker.start()
    try:
        got = [await loop.run_in_executor(None, out.get, True, 120) for _ in workers]
        for answer in got:
            assert isinstance(answer, tuple), answer
    finally:
        together.abort()
        for worker in workers:
            await loop.run_in_executor(None, worker.join, 30)
            if worker.is_alive():
                worker.kill()
    return got
