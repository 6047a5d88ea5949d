"""Turns per second over one and three replicas, and the store calls each turn cost.

A round sends ``sessions x sends`` turns (each session's sends in order, the sessions at
once) through a front door of its own (a store over its own pool, not counted), to replicas
that serve already, and times them from the first send until every turn has ended. The
replicas run the demo agent (one ``work`` call per turn, a tool of 0 s) over store objects
wrapped to count their calls:

- ``1 replica``: one :class:`Service` in this process;
- ``3 replicas, 1 process``: three :class:`Service` objects in this process, over three pools;
- ``3 processes``: three ``scripts/service_replica.py`` processes (``bench._service_replica``, which
  counts their calls and writes them out when the process ends).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench._service_counting import Counting, counting
from bench._service_replica import COUNTS
from bench._service_stores import Target
from steerable.service import Service
from steerable.service.demo import demo_agent

POLL, LEASE = 1.0, 15.0
TIMEOUT = 120.0
ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Mode:
    """One way of serving: ``run(turns)`` serves one round, returns (seconds, calls)."""

    name: str
    replicas: int
    run: Callable[[int, int], Awaitable[tuple[float, Counter[str]]]]
    seconds: list[float] = field(default_factory=list)
    turns: int = 0
    calls: Counter[str] = field(default_factory=Counter)


async def _send_all(front: Service, sessions: int, sends: int) -> None:
    async def one(session: str) -> None:
        for index in range(sends):
            await front.send(session, f"job {index}")

    tag = uuid.uuid4().hex[:8]
    await asyncio.gather(*(one(f"tp-{tag}-{s}") for s in range(sessions)))


async def _until(ended: Callable[[], Awaitable[int]], total: int, pause: float) -> None:
    deadline = time.monotonic() + TIMEOUT
    while await ended() < total:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{total} turns did not end in {TIMEOUT} s")
        await asyncio.sleep(pause)


@contextlib.asynccontextmanager
async def modes(target: Target, root: Path) -> AsyncIterator[list[Mode]]:
    """The three modes over ``target`` (Postgres), their pools opened once for all rounds."""
    front = Service(counting(await target.open()))  # its counts are not read
    stores = [counting(await target.open()) for _ in range(3)]
    found = [
        Mode("1 replica", 1, lambda s, n: _in_process(front, stores[:1], s, n)),
        Mode("3 replicas, 1 process", 3, lambda s, n: _in_process(front, stores, s, n)),
    ]
    if target.url is not None:
        url = target.url
        found.append(Mode("3 processes", 3, lambda s, n: _processes(front, url, root, s, n)))
    yield found


async def _in_process(
    front: Service, stores: list[Counting], sessions: int, sends: int
) -> tuple[float, Counter[str]]:
    agent = demo_agent(calls=1, seconds=0.0)
    services = [
        Service(store, agent, replica=f"r{i}", poll=POLL, lease=LEASE)
        for i, store in enumerate(stores)
    ]
    for store in stores:
        store.calls.clear()
    async with contextlib.AsyncExitStack() as stack:
        replicas = [await stack.enter_async_context(s.serving()) for s in services]
        await asyncio.sleep(0.2)  # the listeners are up

        async def ended() -> int:
            return sum(r.counters.ended for r in replicas)

        start = time.perf_counter()
        await _send_all(front, sessions, sends)
        await _until(ended, sessions * sends, 0.005)  # reading counters costs no I/O
        seconds = time.perf_counter() - start
        calls = sum((Counter(s.calls) for s in stores), Counter[str]())
    return seconds, calls


class _Process:
    """A replica process and its JSON-line channel."""

    def __init__(self, process: asyncio.subprocess.Process, counts: Path) -> None:
        self.process = process
        self.counts = counts

    async def ask(self, command: dict[str, Any]) -> Any:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write((json.dumps(command) + "\n").encode())
        await self.process.stdin.drain()
        answer = json.loads(await self.process.stdout.readline())
        assert answer["ok"], answer
        return answer["result"]

    async def close(self) -> Counter[str]:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            await asyncio.wait_for(self.process.wait(), 30)
        except TimeoutError:
            self.process.kill()
            await self.process.wait()
        if not self.counts.exists():
            return Counter()
        return Counter(json.loads(self.counts.read_text(encoding="utf-8")))


async def _start(url: str, name: str, root: Path) -> _Process:
    counts = root / f"counts-{name}-{uuid.uuid4().hex[:6]}.json"
    command = ["-m", "bench._service_replica", "--store", url, "--replica", name]
    command += ["--lease", str(LEASE), "--poll", str(POLL), "--seconds", "0", "--calls", "1"]
    with (root / f"{name}.log").open("ab") as log:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            *command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=log,
            cwd=ROOT,
            env={**os.environ, COUNTS: str(counts)},
        )
    started = _Process(process, counts)
    assert process.stdout is not None
    ready = await asyncio.wait_for(process.stdout.readline(), 60)
    if not ready or not json.loads(ready).get("ready"):
        raise RuntimeError(f"replica {name} did not start; see {root / (name + '.log')}")
    return started


async def _processes(
    front: Service, url: str, root: Path, sessions: int, sends: int
) -> tuple[float, Counter[str]]:
    processes = await asyncio.gather(*(_start(url, f"p{i}", root) for i in range(3)))
    try:

        async def ended() -> int:
            counters = await asyncio.gather(*(p.ask({"op": "counters"}) for p in processes))
            return sum(int(c["ended"]) for c in counters)

        start = time.perf_counter()
        await _send_all(front, sessions, sends)
        await _until(ended, sessions * sends, 0.02)  # asking costs the replicas a little
        seconds = time.perf_counter() - start
    except TimeoutError:
        for index in range(3):  # what the replicas said, before the directory goes
            log = (root / f"p{index}.log").read_text(encoding="utf-8", errors="replace")
            print(f"-- replica p{index}:\n{log[-2000:]}", file=sys.stderr)
        raise
    finally:
        counts = await asyncio.gather(*(p.close() for p in processes))
    return seconds, sum(counts, Counter[str]())


async def measure(found: list[Mode], rounds: int, sessions: int, sends: int) -> None:
    """``rounds`` interleaved rounds of every mode (rotating order), after one warm-up each."""
    for mode in found:
        await mode.run(max(2, sessions // 4), 1)
    for index in range(rounds):
        shift = index % len(found)
        for mode in found[shift:] + found[:shift]:
            seconds, calls = await mode.run(sessions, sends)
            mode.seconds.append(seconds)
            mode.turns += sessions * sends
            mode.calls += calls
