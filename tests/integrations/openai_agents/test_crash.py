"""SIGKILL in the middle of a run, then the retry the docs show: ``Runner.run(agent, [], ...)``.

A run given ``session=`` alone has stored its input before the model is asked (another
process reads it); a steered run has stored each step with the steer it took. The retry, a
new process's ``Runner.run(agent, [], session=..., run_config=steering(session))``, carries
on from what is stored: each steer once, in place, and nothing stored twice.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

from agents import Agent, Runner
from agents.testing import ScriptedModel, assistant_message

from steerable import Store, open_session, transcript_problems
from steerable.integrations.openai_agents import SteerableSession, steering
from tests.integrations.openai_agents.support import kinds, stored_items

ROOT = Path(__file__).resolve().parents[3]


async def _line(child: asyncio.subprocess.Process) -> str:
    assert child.stdout is not None
    return (await child.stdout.readline()).decode().strip()


async def _killed(store_url: str, mode: str, store: Store) -> None:
    """Run crashing_run in ``mode``; steer during its first call (steered) and kill it in its
    second, or (plain) kill it in its first."""
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.integrations.openai_agents.crashing_run",
        store_url,
        mode,
        cwd=ROOT,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert child.stdin is not None
    try:
        assert await _line(child) == "in-1"
        if mode == "steered":
            await open_session("s", store).steer("use the cache", id="st-1")
            child.stdin.write(b"go\n")
            await child.stdin.drain()
            assert await _line(child) == "in-2"  # the step before it stored and took the steer
    finally:
        child.send_signal(signal.SIGKILL)
        await child.wait()
    assert child.returncode == -signal.SIGKILL


async def _retry(store: Store) -> tuple[ScriptedModel, list[str]]:
    model = ScriptedModel([[assistant_message("done, from the cache")]])
    session = SteerableSession(open_session("s", store))
    agent = Agent(name="a", model=model)
    result = await Runner.run(agent, [], session=session, run_config=steering(session))
    assert result.final_output == "done, from the cache"
    stored = await open_session("s", store).messages()
    assert transcript_problems(stored) == []
    return model, kinds(stored_items(stored))


async def test_a_plain_run_killed_in_its_first_tool_call_has_stored_its_input(
    store_url: str, store: Store
) -> None:
    await _killed(store_url, "plain", store)
    assert kinds(stored_items(await open_session("s", store).messages())) == ["user:hi"]
    await open_session("s", store).steer("use the cache", id="st-1")
    model, stored = await _retry(store)
    assert [kinds(c.input) for c in model.calls] == [["user:hi", "user:use the cache"]]
    assert stored == ["user:hi", "user:use the cache", "message"]


async def test_a_steered_run_killed_after_a_step_retries_with_its_steer_once_in_place(
    store_url: str, store: Store
) -> None:
    await _killed(store_url, "steered", store)
    killed = ["user:hi", "function_call", "function_call_output", "user:use the cache"]
    assert kinds(stored_items(await open_session("s", store).messages())) == killed
    await open_session("s", store).steer("use the cache", id="st-1")  # a client's retry
    model, stored = await _retry(store)
    assert [kinds(c.input) for c in model.calls] == [killed]  # the steer once, after the output
    assert stored == [*killed, "message"]
    assert await open_session("s", store).steers() == []
