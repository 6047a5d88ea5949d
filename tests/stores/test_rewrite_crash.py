"""A process SIGKILLed while it cuts and deletes sessions leaves each session whole.

``ops_worker.py rewrite`` runs its ops on one session after another, printing
each op as it returns; the test kills it at a random moment, many times, then reads every
session it touched. A session must look exactly as after its last reported op, or as
after the next one (the op the kill interrupted committed, or did not): never half a cut
(some of the tail gone) or half a delete (the transcript gone and the steers, inputs or
events left).

Each store joins as a parameter of the ``store_url`` fixture, which yields the URL of a
fresh database of that store (``steerable.stores.url.open_url``).
"""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import pytest

from steerable.stores.url import open_url

WORKER = Path(__file__).with_name("ops_worker.py")
S = TypeVar("S")
ROOT = Path(__file__).parents[2]
KILLS = 10
# how long after a report the kill may land, per store: about one op (a MongoDB delete is
# some 20 ms of commands), so that kills fall inside an op's writes and not only after them
_SPAN = {"sqlite": 0.003, "mongodb": 0.03, "postgresql": 0.006, "mysql": 0.006}

# what a session holds after op K of the worker's OPS (None: before any op): messages
# stored, the steers waiting, whether input "p" is known, whether it has any event
_AFTER: dict[int | None, tuple[int, tuple[str, ...], bool, bool]] = {
    None: (0, (), False, False),
    0: (0, (), True, True),
    1: (0, ("w1",), True, True),
    2: (0, ("w1", "w2"), True, True),
    3: (6, ("w2",), True, True),
    4: (2, ("w2",), True, True),
    5: (0, (), False, False),
}


@pytest.fixture(params=["sqlite", "mongodb", "postgres", "mysql"])
async def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """The URL of a fresh database of each store."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'rewrite.db'}"
    elif request.param == "mongodb":
        request.getfixturevalue("mongo_server")
        from tests.stores.mongodb._server import scratch_url  # pymongo: only for this store

        async with scratch_url() as url:
            yield url
    elif request.param == "postgres":
        from tests.stores.postgres.support import fresh_database, url_of  # asyncpg: this store

        async with fresh_database("steerable_rewrite_") as name:
            yield url_of(name)
    elif request.param == "mysql":
        from tests.stores.mysql import server  # aiomysql: only for this store

        async with server.migrated_url() as url:
            yield url


async def _state(store: Any, sid: str) -> tuple[int, tuple[str, ...], bool, bool]:
    messages = await store.messages(sid)
    waiting = tuple(s.id for s in await store.steers(sid))
    known = await store.input(sid, "p") is not None
    events = bool(await store.events(sid, after=0, limit=1))
    return len(messages), waiting, known, events


async def kill_once(
    url: str,
    prefix: str,
    rng: random.Random,
    *,
    kind: str = "rewrite",
    aim: tuple[int, ...] = (3, 4),
) -> dict[int, int]:
    """Start the worker on ops of ``kind``, kill it after a random number of ops, just
    after a report that one of the ops ``aim`` follows; the last op done per session."""
    worker = await asyncio.create_subprocess_exec(
        sys.executable,
        str(WORKER),
        kind,
        url,
        prefix,
        cwd=ROOT,
        stdout=subprocess.PIPE,
    )
    assert worker.stdout is not None
    done: dict[int, int] = {}
    try:
        # a random number of ops, then on to a report the cut or the delete follows (ops 3
        # and 4), so most kills land in the writes under test, not in the ones before them
        count, op = rng.randint(1, 40), -1
        while count > 0 or op not in aim:
            line = await asyncio.wait_for(worker.stdout.readline(), 60)
            assert line, "the worker ended before it was killed"
            _, i, op_text = line.decode().split()
            op = done[int(i)] = int(op_text)
            count -= 1
        await asyncio.sleep(rng.uniform(0, _SPAN.get(url.split(":")[0], 0.003)))
    finally:
        worker.send_signal(signal.SIGKILL)
        rest, _ = await worker.communicate()
    for text in rest.decode().splitlines():  # what it reported between the read and the kill
        _, i, op_text = text.split()
        done[int(i)] = int(op_text)
    assert worker.returncode == -signal.SIGKILL
    return done


async def killed_rounds(
    url: str,
    kind: str,
    aim: tuple[int, ...],
    after: Mapping[int | None, S],
    state: Callable[[Any, str], Awaitable[S]],
) -> None:
    """Kill the worker on ops of ``kind`` :data:`KILLS` times (aimed after ``aim``), then
    check every session it touched: as after its last reported op or the next one
    (``after`` maps an op to what it leaves; None: before any), the finished ones as after
    the last op."""
    final = max(op for op in after if op is not None)
    rng = random.Random()
    for round in range(KILLS):
        prefix = f"{kind}{round}"
        done = await kill_once(url, prefix, rng, kind=kind, aim=aim)
        last = max(done)
        async with open_url(url) as store:
            for i in range(last + 2):
                got = await state(store, f"{prefix}-{i}")
                if i < last:
                    assert got == after[final], f"{prefix}-{i}, finished before the kill"
                    continue
                op = done.get(i)
                following = 0 if op is None else min(op + 1, final)
                assert got in {after[op], after[following]}, f"{prefix}-{i} after {op}: {got}"


@pytest.mark.slow
async def test_a_kill_mid_cut_or_delete_leaves_each_session_whole(store_url: str) -> None:
    await killed_rounds(store_url, "rewrite", (3, 4), _AFTER, _state)
