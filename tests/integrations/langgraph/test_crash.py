"""SIGKILL after the step that took a steer was stored; a retry has the steer once, in place.

A child process (``child.py``) runs the graph and kills itself: in the tool of the step
after the take (the checkpoint has the steer), inside the taking step right after the
store answered (the checkpoint does not), or with no checkpointer at all (the prompt with
an id, or the usual dict without one). A second child resumes the thread (or, with no
checkpoint, runs the same prompt again).
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from steerable.integrations.langgraph import from_stored
from steerable.session import Session
from steerable.stores.sqlite import SQLiteStore
from tests.integrations.langgraph.chat import valid
from tests.integrations.langgraph.support import ROOT, shape

pytestmark = pytest.mark.slow


async def _child(tmp_path: Path, how: str, attempt: int) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.integrations.langgraph.child",
        str(tmp_path / "store.db"),
        str(tmp_path / "checkpoints.db"),
        str(tmp_path / "requests.jsonl"),
        how,
        str(attempt),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode() + err.decode()


def _requests(tmp_path: Path) -> list[list[dict[str, Any]]]:
    lines = (tmp_path / "requests.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["messages"] for line in lines]


@pytest.mark.parametrize("how", ["tool", "take", "nocheckpoint", "noid"])
async def test_a_retry_after_sigkill_has_the_steer_once_in_place_and_never_takes_it_again(
    tmp_path: Path, how: str
) -> None:
    code, said = await _child(tmp_path, how, 1)
    assert code == -signal.SIGKILL, said
    async with SQLiteStore(tmp_path / "store.db") as store:
        killed = await Session("s", store).messages()
    assert "steer:skip friday" in shape(killed)  # the take was stored before the kill
    before = len(_requests(tmp_path))

    code, said = await _child(tmp_path, how, 2)
    assert code == 0, said
    run = json.loads(said.splitlines()[0])["ids"]
    async with SQLiteStore(tmp_path / "store.db") as store:
        session = Session("s", store)
        stored, waiting = await session.messages(), await session.steers()

    assert waiting == []
    assert shape(stored) == [
        *("user:plan my week", "ai", "tool", "steer:skip friday"),
        *("ai", "tool", "ai", "tool", "ai"),
    ]
    assert [m.id for m in stored] == run  # the graph's state is the stored transcript
    assert valid(from_stored(stored))
    retried = _requests(tmp_path)[before:]
    assert retried, "the retry asked the model"
    for request in retried:
        seen = [m["id"] for m in request]
        assert seen.count("k") == 1 and seen.index("k") == 3, seen
        assert _answered(request), request
    assert retried[-1][-1]["result"]


def _answered(request: list[dict[str, Any]]) -> bool:
    """Every tool call of the request answered by the tool results right after it."""
    open_calls: set[str] = set()
    for message in request:
        if message["answers"] is not None:
            if message["answers"] not in open_calls:
                return False
            open_calls.discard(message["answers"])
        elif open_calls:
            return False
        else:
            open_calls = set(message["calls"])
    return not open_calls
