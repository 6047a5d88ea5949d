"""SIGKILL after the step that took a steer was stored: the retry has it once, in place."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import pytest
from pydantic_ai import Agent

from steerable import Session, transcript_problems
from steerable.integrations.pydantic_ai import Steering, history
from steerable.stores.sqlite import SQLiteStore
from tests.integrations.pydantic_ai.support import Script, problems, say, view

ROOT = Path(__file__).resolve().parents[3]


def work() -> str:
    """Some work."""
    raise AssertionError("the retry has no call to make")


async def _line(child: asyncio.subprocess.Process) -> str:
    assert child.stdout is not None
    return (await child.stdout.readline()).decode().strip()


@pytest.mark.parametrize("retry", ["agent", "load"])
async def test_a_run_killed_after_the_step_that_took_a_steer_retries_with_it_once(
    tmp_path: Path, retry: str
) -> None:
    """The retry is ``agent.run(None, conversation_id=...)`` on an agent given
    ``Steering(store)``, or the per-run shape: a ``Steering.load`` and its history."""
    path = tmp_path / "pa.db"
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.integrations.pydantic_ai.crashing_run",
        str(path),
        cwd=ROOT,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert child.stdin is not None
    try:
        assert await _line(child) == "in-1"  # the first call runs
        async with SQLiteStore(path) as store:
            await Session("s", store).steer("use the cache", id="st-1")
        child.stdin.write(b"go\n")
        await child.stdin.drain()
        assert await _line(child) == "in-2"  # the step before it stored and took the steer
    finally:
        child.send_signal(signal.SIGKILL)
        await child.wait()
    assert child.returncode == -signal.SIGKILL

    script = Script(say("done, from the cache"))
    steering: Steering | None = None

    async with SQLiteStore(path) as store:
        session = Session("s", store)
        killed = await session.messages()
        assert [(m.role, m.steered, m.text) for m in killed] == [
            ("user", False, "go"),
            ("assistant", False, ""),
            ("user", False, ""),
            ("user", True, "use the cache"),
        ]
        await session.steer("use the cache", id="st-1")  # a client's retry: the same steer
        if retry == "agent":
            agent = Agent(script.model, tools=[work], capabilities=[Steering(store)])
            result = await agent.run(None, conversation_id="s")
        else:
            steering = await Steering.load(session)
            result = await Agent(script.model, tools=[work]).run(
                None, message_history=steering.history, capabilities=[steering]
            )
        stored = await session.messages()
        assert await session.steers() == []

    assert result.output == "done, from the cache"
    # the retried run's request has the steer once, after the return, and nothing is redone
    assert script.views() == [["user:go", "call:c1", "return:c1", "user:use the cache"]]
    assert steering is None or steering.taken == []  # never taken again
    assert problems(history(killed)) == []  # every call has its return, no orphan return
    assert [m.id for m in stored if m.steered] == ["st-1"]
    assert stored == [*killed, stored[-1]]  # the answer is all the retry adds
    assert stored[-1].text == "done, from the cache"
    assert view(result.all_messages()) == script.views()[0] + ["say:done, from the cache"]
    assert transcript_problems(stored) == []
