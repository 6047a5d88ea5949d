"""A process killed with SIGKILL at each point of a step, resumed by a fresh process.

Each steer must end up in the transcript exactly once, none left waiting, and the stored
transcript must be one a provider would accept.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from steerable import transcript_problems
from steerable.stores.sqlite import SQLiteStore

WORKER = str(Path(__file__).with_name("crash_worker.py"))
STEERS = ["before", "during-1", "during-2"]


def worker(database: Path, point: str, role: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, WORKER, str(database), point, role],
        capture_output=True,
        text=True,
        timeout=60,
    )


async def stored(database: Path) -> tuple[list[str], list[str], int]:
    async with SQLiteStore(database) as store:
        messages = await store.messages("crash")
        left = await store.steers("crash")
    return [m.id for m in messages if m.steered], transcript_problems(messages), len(left)


@pytest.mark.parametrize("point", ["after-take", "after-save", "during-tool", "during-model"])
def test_killed_then_resumed_each_steer_exactly_once(tmp_path: Path, point: str) -> None:
    database = tmp_path / "crash.db"
    first = worker(database, point, "first")
    assert first.returncode == -signal.SIGKILL, first.stderr
    steered, problems, _ = asyncio.run(stored(database))
    assert problems == []
    assert len(steered) == len(set(steered))  # nothing twice, even before the resume

    resumed = worker(database, point, "resume")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.startswith("completed all done")
    steered, problems, left = asyncio.run(stored(database))
    assert sorted(steered) == sorted(STEERS)
    assert problems == []
    assert left == 0


def test_the_worker_without_a_kill_completes(tmp_path: Path) -> None:
    """The baseline: the same turn, never killed, takes the same steers."""
    database = tmp_path / "crash.db"
    done = worker(database, "never", "first")
    assert done.returncode == 0, done.stderr
    steered, problems, left = asyncio.run(stored(database))
    assert sorted(steered) == sorted(STEERS) and problems == [] and left == 0
