"""SIGKILL in the middle of writes: the reopened saver gives the last whole checkpoint.

A child process (``writer.py``) writes checkpoints to a SQLite file as fast as it can and
prints each one once its ``aput`` returned; the test kills it with SIGKILL after some lines,
wherever it is, or the writer kills itself inside its N-th save, after the store stored it
(a saver that split a put into two saves fails there: the half stored reads back torn).
Reopened, the thread's latest checkpoint is the last one printed or the one after (stored,
killed before its line), holding exactly the messages of its step; every checkpoint listed
is whole, and no record is torn.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from langchain_core.runnables import RunnableConfig

from steerable.integrations.langgraph._saver import SteerableSaver
from steerable.stores.sqlite import SQLiteStore
from tests.integrations.langgraph_saver.writer import THREAD, messages_at

ROOT = Path(__file__).resolve().parents[3]


def _kill(path: Path, lines: int, die_after: int) -> int:
    """Run the writer until ``lines`` lines (then SIGKILL) or its own death; the last step
    it printed (what it printed while the kill was on its way is read too: on a loaded
    machine it may be several steps past the ``lines``-th).

    Blocking, run in a thread: asyncio's child watcher may lose a child's status (it then
    reports 255) when something else in the test process reaps children.
    """
    command = [sys.executable, "-m", "tests.integrations.langgraph_saver.writer", str(path)]
    child = subprocess.Popen([*command, str(die_after)], cwd=ROOT, stdout=subprocess.PIPE)
    assert child.stdout is not None
    last = -1
    try:
        for _ in range(lines):
            line = child.stdout.readline()  # the test's timeout bounds a silent child
            if not line:  # it killed itself
                break
            assert line.startswith(b"stored "), line
            last = int(line.split()[1])
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGKILL)
        child.wait()
        rest = child.stdout.read().split(b"\n")[:-1]  # whole lines: a kill may cut the last
        child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    for line in rest:
        assert line.startswith(b"stored "), line
        last = int(line.split()[1])
    return last


@pytest.mark.slow
@pytest.mark.parametrize(
    ("lines", "die_after"), [(7, 0), (40, 0), (10**6, 1), (10**6, 4), (10**6, 9)]
)
async def test_a_killed_writer_leaves_the_last_whole_checkpoint(
    lines: int, die_after: int, tmp_path: Path
) -> None:
    """After the kill: latest is the last printed (or the next), whole; all listed whole."""
    path = tmp_path / "crash.db"
    last = await asyncio.to_thread(_kill, path, lines, die_after)
    async with SQLiteStore(path) as store:
        saver = SteerableSaver(store)
        config: RunnableConfig = {"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}}
        latest = await saver.aget_tuple(config)
        assert latest is not None
        step = latest.metadata["step"]
        assert step in (last, last + 1)
        assert latest.checkpoint["channel_values"] == {"messages": messages_at(step), "step": step}
        assert [w[2] for w in latest.pending_writes or []] in ([], [f"write {step}"])
        listed = [t async for t in saver.alist(config)]
        assert [t.metadata["step"] for t in listed] == list(range(step, -1, -1))
        for tup in listed:
            at = tup.metadata["step"]
            assert tup.checkpoint["channel_values"] == {"messages": messages_at(at), "step": at}
        # and the thread goes on: the next put extends the log the dead writer left
        checkpoint = dict(latest.checkpoint)
        checkpoint["id"] = "~after-the-crash"  # sorts after every uuid6 id
        await saver.aput(latest.config, checkpoint, {"step": step + 1}, {})  # type: ignore[arg-type]
        again = await SteerableSaver(store).aget_tuple(config)
        assert again is not None and again.metadata["step"] == step + 1
        assert again.checkpoint["channel_values"]["messages"] == messages_at(step)
