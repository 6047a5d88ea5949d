"""Three replicas over one SQLite file and nothing else; run ``python main.py [DATABASE]``.

Replica B leaves a steer before any run exists. Replica A starts the turn, takes the steer
at its first step and is killed with SIGKILL in the middle of a tool call. Replica C loads
the transcript it never produced, carries the turn on and answers. Then the store must hold
no steer, and the steer must appear exactly once in the transcript. Exits 1 if not.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from steerable import transcript_problems
from steerable.stores.sqlite import SQLiteStore

HERE = Path(__file__).resolve().parent
REPLICA = str(HERE / "replica.py")
SESSION = "conversation-1"


def replica(role: str, database: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, REPLICA, role, database], stdout=subprocess.PIPE, text=True
    )


def kill_in_tool(process: subprocess.Popen[str]) -> None:
    """Wait until replica A is inside its tool call, then SIGKILL it."""
    assert process.stdout is not None
    for line in process.stdout:
        if line.strip() == "tool-started":
            os.kill(process.pid, signal.SIGKILL)
            break
    process.wait(timeout=30)


async def inspect(database: str) -> tuple[list[str], list[bool], int]:
    async with SQLiteStore(database) as store:
        messages = await store.messages(SESSION)
        problems = transcript_problems(messages)
        left = len(await store.steers(SESSION))
    return [m.id for m in messages], [not problems], left


def main(database: str) -> int:
    failures: list[str] = []
    b = replica("steer", database)
    if b.wait(timeout=60) != 0:
        return print("replica B failed") or 1
    print(f"replica B   left a steer in {Path(database).name}; no run existed anywhere")

    a = replica("run", database)
    kill_in_tool(a)
    ids, _, _ = asyncio.run(inspect(database))
    killed = a.returncode == -signal.SIGKILL
    print(
        f"replica A   took it at its first step, called a tool and was killed (SIGKILL: {killed})"
    )
    print(
        f"transcript  {len(ids)} messages stored by A; the steer is message {ids.index('steer-1')}"
        if "steer-1" in ids
        else f"transcript  {len(ids)} messages, and no steer in them"
    )
    if not killed:
        failures.append("replica A was not killed mid-turn")
    if ids.count("steer-1") != 1:
        failures.append("replica A did not record the steer at its first step")

    c = replica("resume", database)
    out, _ = c.communicate(timeout=60)
    lines = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    loaded = lines.get("loaded", "?")
    print(f"replica C   resumed from {loaded} messages it never produced, and answered")
    print(f"            {lines.get('answer', '(no answer)')!r}")
    if c.returncode != 0 or "expired" not in lines.get("answer", ""):
        failures.append("replica C did not answer the steered turn")

    ids, valid, left = asyncio.run(inspect(database))
    print(
        f"steers      {left} left in the store; the steer is in the transcript"
        f" {ids.count('steer-1')} time(s)"
    )
    if left or ids.count("steer-1") != 1:
        failures.append("the steer was not handed over exactly once")
    if not all(valid):
        failures.append("the transcript is not one a provider would accept")
    for failure in failures:
        print(f"FAILED      {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) > 1:
        sys.exit(main(sys.argv[1]))
    with tempfile.TemporaryDirectory(prefix="steerable-demo-") as directory:
        sys.exit(main(str(Path(directory) / "sessions.db")))
