"""A process that runs one kind of ops on sessions without end, until it is killed.

``python ops_worker.py KIND STORE_URL PREFIX``: for sessions ``PREFIX-0``, ``PREFIX-1``, ...
it runs the ops of ``KIND`` (:data:`KINDS`) in order, printing ``done I K`` (flushed) after
op ``K`` of session ``I`` returned. The crash tests (test_rewrite_crash.py,
test_queue_crash.py, test_fork_crash.py, test_repair_crash.py, test_end_crash.py) kill it
and know what each op leaves behind; not a test module itself.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from steerable import Steer, ToolResult, assistant, user
from steerable.service_store import Input, Outcome
from steerable.store import rewritable
from steerable.stores.url import open_url

MESSAGES = 300  # what the fork ops save, then fork


async def rewrite(store: Any, sid: str, op: int) -> None:
    """Op number ``op`` of its kind (:data:`KINDS`) on session ``sid``."""
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


async def queue(store: Any, sid: str, op: int) -> None:
    """Op number ``op`` of its kind (:data:`KINDS`) on session ``sid``."""
    if op == 0:
        await store.enqueue(sid, Input("send", "the head", "h"))
    elif op in (1, 2):
        await store.enqueue(sid, Input("steer", f"steer {op}", f"s{op}"))
    elif op in (3, 5):
        await store.set_metadata(sid, {"v": 1 if op == 3 else 2, "pad": "x" * 200})
    else:
        await store.cancel(sid, "h")


async def fork(store: Any, sid: str, op: int) -> None:
    """Op number ``op`` of its kind on session ``sid`` (its forks are ``sid/a``, ``sid/b``)."""
    if op == 0:
        texts = [user(f"u{i}") if i % 2 == 0 else assistant(f"a{i}" * 20) for i in range(MESSAGES)]
        await store.save(sid, texts, at=0)
    elif op == 1:
        messages = await store.messages(sid)
        await store.fork(sid, f"{sid}/a", through=messages[199].id)
    else:
        await store.fork(sid, f"{sid}/b")


async def repair(store: Any, sid: str, op: int) -> None:
    """Op number ``op`` of its kind on session ``sid``: saves, swaps of the tail, the journal."""
    if op == 0:
        await store.save(sid, [user(f"m{i}", id=f"m{i}") for i in range(200)], at=0)
    elif op == 1:
        old = [f"m{i}" for i in range(100, 200)]
        new = [assistant(f"r{i}" * 200, id=f"r{i}") for i in range(100, 300)]
        await store.replace(sid, at=100, old=old, messages=new)
    elif op == 2:
        await store.begin_calls(sid, ["k0"])
    elif op == 3:
        await store.end_call(sid, "k0", ToolResult("c0", "pay", "paid"))
    else:
        old = [f"m{i}" for i in range(50, 100)] + [f"r{i}" for i in range(100, 300)]
        await store.replace(sid, at=50, old=old, messages=[])


_LEASES: dict[str, Any] = {}  # the end ops' lease of each session, from its claim


async def end(store: Any, sid: str, op: int) -> None:
    """Op number ``op`` of its kind on session ``sid``: a turn, ended with its answer saved."""
    if op == 0:
        await store.enqueue(sid, Input("send", "the prompt", "p"))
    elif op == 1:
        claim = await store.claim("w", seconds=600, cap=16, session=sid)
        _LEASES[sid] = claim.lease
    elif op == 2:
        await store.step(_LEASES[sid], [user("the prompt", id="p")], at=0, take=16)
    else:
        answer = [assistant("calling", id="c"), user("result", id="r"), assistant("done", id="d")]
        outcome = Outcome("completed", "done")
        await store.end_turn(_LEASES.pop(sid), outcome, last=answer, at=1)


async def first(store: Any, sid: str, op: int) -> None:
    """Op ``op`` on ``sid``: a turn whose claim makes its first step, taking two steers."""
    if op == 0:
        await store.enqueue(sid, Input("send", "the prompt", "p"))
    elif op in (1, 2):
        await store.enqueue(sid, Input("steer", f"steer {op}", f"s{op}"))
    elif op == 3:
        claim = await store.claim("w", seconds=600, cap=16, session=sid, first=True)
        _LEASES[sid] = claim.lease
    else:
        outcome = Outcome("completed", "done")
        await store.end_turn(_LEASES.pop(sid), outcome, last=[assistant("done", id="d")], at=3)


Op = Callable[[Any, str, int], Awaitable[None]]

KINDS: dict[str, tuple[tuple[str, ...], Op]] = {
    "rewrite": (
        ("enqueue", "steer w1", "steer w2", "save and take", "truncate", "delete"),
        rewrite,
    ),
    "queue": (("send h", "steer s1", "steer s2", "metadata 1", "cancel h", "metadata 2"), queue),
    "fork": (("save 300", "fork through 200", "fork all"), fork),
    "repair": (("save 200", "replace 100 by 200", "begin", "end", "replace to 50"), repair),
    "end": (("send p", "claim", "save the prompt", "end with the answer"), end),
    "first": (("send p", "steer s1", "steer s2", "claim, first step", "end"), first),
}
"""Each kind's ops, in the order they are done to a session, and what does them."""


async def main(kind: str, url: str, prefix: str) -> None:
    ops, run_op = KINDS[kind]
    async with open_url(url) as store:
        i = 0
        while True:
            for op in range(len(ops)):
                await run_op(store, f"{prefix}-{i}", op)
                print(f"done {i} {op}", flush=True)
            i += 1


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
