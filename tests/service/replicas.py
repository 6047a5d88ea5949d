"""Replica processes for the process tests: start them, talk to each, kill, pause, read.

Each replica is ``scripts/service_replica.py`` in a process of its own (``sys.executable``),
over the store URL the test gives, serving the keyless demo agent. A test sends commands *through*
a chosen replica (one JSON line in, one JSON line out) and reads what every replica asked
the model from the requests file they share (one JSON line per model request)::

    async with Replicas(url, tmp_path) as group:
        a, b = await group.start("a", "b", lease=1.5, seconds=1.0)
        accepted = await a.call("send", session="s", text="hi", id="x")
        a.kill()

Every child is killed when the group closes, whatever the test did (paused ones too).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import TracebackType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "service_replica.py"
ANSWER_SECONDS = 30.0  # a live replica answers a command at once; this only bounds a hang


async def until(check: Callable[[], Awaitable[bool]], what: str, *, seconds: float = 30.0) -> None:
    """Return once ``check()`` is true; fail naming ``what`` if it never is (a hang guard,
    not a timing assertion: every wait here is far above what the behaviour needs)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not await check():
        if loop.time() > deadline:
            raise AssertionError(f"never: {what}")
        await asyncio.sleep(0.05)


def _flags(options: dict[str, Any]) -> list[str]:
    flags: list[str] = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            flags.append(flag)
        elif value is not False and value is not None:
            flags += [flag, str(value)]
    return flags


class ReplicaProcess:
    """One running ``scripts/service_replica.py``: its commands, its signals, its log."""

    def __init__(self, name: str, process: asyncio.subprocess.Process, log: Path) -> None:
        self.name = name
        self.process = process
        self.log = log
        self.killed = False
        self._lock = asyncio.Lock()  # one command at a time: answers come in order

    def __repr__(self) -> str:
        return f"ReplicaProcess({self.name!r}, pid={self.process.pid})"

    async def ready(self) -> None:
        """Wait for the replica's ready line (fail with its log if it dies first)."""
        answer = await self._read("its ready line", seconds=60.0)
        if not answer.get("ready"):
            raise AssertionError(f"replica {self.name} said {answer!r} before ready")

    async def ask(self, op: str, **fields: Any) -> dict[str, Any]:
        """Send one command through this replica; its answer, ``{"ok": ..., ...}``."""
        assert self.process.stdin is not None
        async with self._lock:
            self.process.stdin.write((json.dumps({"op": op} | fields) + "\n").encode())
            await self.process.stdin.drain()
            return await self._read(f"an answer to {op}")

    async def call(self, op: str, **fields: Any) -> Any:
        """Like :meth:`ask`, for a command that must succeed: its ``result``."""
        answer = await self.ask(op, **fields)
        if not answer.get("ok"):
            raise AssertionError(f"replica {self.name}: {op} {fields} -> {answer}")
        return answer["result"]

    async def call_all(self, *commands: dict[str, Any]) -> list[Any]:
        """Send ``commands`` (each ``{"op": ..., ...}``) through this replica in one write,
        without waiting for an answer in between: the replica runs each right after the one
        before has answered (no round trip of the pipe between them). Their ``result``s, in
        order; every one must succeed."""
        assert self.process.stdin is not None
        async with self._lock:
            self.process.stdin.write("".join(json.dumps(c) + "\n" for c in commands).encode())
            await self.process.stdin.drain()
            answers = [await self._read(f"an answer to {c['op']}") for c in commands]
        for command, answer in zip(commands, answers, strict=True):
            if not answer.get("ok"):
                raise AssertionError(f"replica {self.name}: {command} -> {answer}")
        return [answer["result"] for answer in answers]

    async def counters(self) -> dict[str, Any]:
        """What this replica did (``claims``, ``resumed``, ``ended``, ``fenced``, ...)."""
        result: dict[str, Any] = await self.call("counters")
        return result

    async def _read(self, what: str, *, seconds: float = ANSWER_SECONDS) -> dict[str, Any]:
        assert self.process.stdout is not None
        try:
            line = await asyncio.wait_for(self.process.stdout.readline(), seconds)
        except TimeoutError:
            raise AssertionError(f"replica {self.name} gave no {what}: {self.tail()}") from None
        if not line:
            raise AssertionError(f"replica {self.name} ended before {what}: {self.tail()}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def tail(self, lines: int = 30) -> str:
        """The end of the replica's log (its stderr), for failure messages."""
        try:
            text = self.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def kill(self) -> None:
        """SIGKILL: the replica dies without a word (its leases run out)."""
        self.killed = True
        self._signal(signal.SIGKILL)

    def pause(self) -> None:
        """SIGSTOP: the replica freezes where it is, leases and all."""
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT: the paused replica goes on as if no time had passed."""
        self._signal(signal.SIGCONT)

    def _signal(self, number: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, number)

    async def close(self) -> None:
        """Kill the process (a paused one too) and reap it and its pipes."""
        self._signal(signal.SIGKILL)
        if self.process.stdin is not None:
            self.process.stdin.close()
        await self.process.wait()
        if self.process.stdout is not None:  # read to EOF so the pipe's transport closes
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.process.stdout.read(), 5)


class Replicas:
    """The replica processes of one test, over one store URL; all killed at the end.

    ``directory`` holds the shared requests file and one log per replica. ``start`` takes
    the options of ``scripts/service_replica.py`` as keywords (``lease=1.5``, ``blocking=True``).
    """

    def __init__(self, store: str, directory: Path) -> None:
        self.store = store
        self.directory = directory
        self.requests_file = directory / "requests.jsonl"
        self.members: dict[str, ReplicaProcess] = {}

    async def __aenter__(self) -> Replicas:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self.close()

    def __getitem__(self, name: str) -> ReplicaProcess:
        return self.members[name]

    async def start(self, *names: str, **options: Any) -> list[ReplicaProcess]:
        """Start a replica per name (all at once), each ready when this returns."""
        started = [await self._spawn(name, options) for name in names]
        await asyncio.gather(*(replica.ready() for replica in started))
        return started

    async def _spawn(self, name: str, options: dict[str, Any]) -> ReplicaProcess:
        if name in self.members:
            raise ValueError(f"a replica {name!r} runs already")
        log = self.directory / f"replica-{name}.log"
        command = [sys.executable, str(SCRIPT), "--store", self.store, "--replica", name]
        command += ["--requests", str(self.requests_file), *_flags(options)]
        env = os.environ | {"PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
        with log.open("wb") as stderr:
            process = await asyncio.create_subprocess_exec(
                *command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=stderr,
                cwd=ROOT,
                env=env,
            )
        replica = ReplicaProcess(name, process, log)
        self.members[name] = replica
        return replica

    def others(self, *names: str) -> list[ReplicaProcess]:
        """The replicas not named (the ones a test talks through, besides the holder)."""
        return [r for n, r in self.members.items() if n not in names]

    def requests(self, turn: str | None = None) -> list[dict[str, Any]]:
        """Every model request recorded so far (of ``turn`` only, if given), in order."""
        if not self.requests_file.exists():
            return []
        lines = self.requests_file.read_text(encoding="utf-8").splitlines()
        every = [json.loads(line) for line in lines if line.strip()]
        return [r for r in every if turn is None or r["turn"] == turn]

    async def counters(self, *names: str) -> dict[str, dict[str, Any]]:
        """The counters of the replicas named (default: every one not killed)."""
        chosen = names or tuple(n for n, r in self.members.items() if not r.killed)
        return {name: await self.members[name].counters() for name in chosen}

    async def close(self) -> None:
        """Kill and reap every replica."""
        members, self.members = list(self.members.values()), {}
        await asyncio.gather(*(m.close() for m in members), return_exceptions=True)
