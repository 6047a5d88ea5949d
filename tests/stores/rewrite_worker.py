"""A process that writes, cuts and deletes sessions without end, until it is killed.

``python rewrite_worker.py STORE_URL PREFIX``: for sessions ``PREFIX-0``, ``PREFIX-1``, ...
it runs the ops of :data:`OPS` in order, printing ``done I K`` (flushed) after op ``K`` of
session ``I`` returned. Used by test_rewrite_crash.py; not a test module itself.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from steerable import Steer, assistant, user
from steerable.service_store import Input
from steerable.store import rewritable
from steerable.stores.url import open_url

OPS = ("enqueue", "steer w1", "steer w2", "save and take", "truncate", "delete")
"""What is done to each session, in order; the test knows what each leaves behind."""


async def run_op(store: Any, sid: str, op: int) -> None:
    """Op number ``op`` of :data:`OPS` on session ``sid``."""
    if op == 0:
        await store.enqueue(sid, Input("send", "the prompt", "p"))
    elif op in (1, 2):
        await store.steer(sid, Steer(f"steer {op}", f"w{op}"))
    elif op == 3:
        messages = [user("one"), assistant("two"), user("three"), assistant("four"), user("5")]
        await store.save(sid, messages, at=0, take=1)
    elif op == 4:
        await rewritable(store).truncate(sid, at=2, length=6)
    else:
        await rewritable(store).delete(sid)


async def main(url: str, prefix: str) -> None:
    async with open_url(url) as store:
        i = 0
        while True:
            for op in range(len(OPS)):
                await run_op(store, f"{prefix}-{i}", op)
                print(f"done {i} {op}", flush=True)
            i += 1


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
