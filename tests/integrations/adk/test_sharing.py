"""One SteerableSessionService and one SteeringPlugin serving several runs at once.

Runs of two sessions through the same plugin take each their own steers; a reader of the
session (``get_session``, as a UI does) while a run holds its events loses none of them; a
second run of a running session is refused, and a cancelled run's hold ends with it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.errors import StaleSessionError
from google.adk.runners import Runner

from steerable.errors import TranscriptConflict
from steerable.integrations.adk import SteerableSessionService, SteeringPlugin
from steerable.stores.sqlite import SQLiteStore
from tests.integrations.adk.replica_agent import ReactiveLlm
from tests.integrations.adk.scripted import problems, texts_of
from tests.integrations.adk.test_steering import user_content


async def _run(runner: Runner, session: str, prompt: str) -> str:
    final = ""
    async for event in runner.run_async(
        user_id="u", session_id=session, new_message=user_content(prompt)
    ):
        if event.is_final_response() and event.content and event.content.parts:
            final = event.content.parts[0].text or final
    return final


async def test_two_sessions_running_at_once_through_one_plugin_take_each_their_own_steers(
    tmp_path: Path,
) -> None:
    both = asyncio.Barrier(3)  # the two tool calls and the test
    release = asyncio.Event()

    async def work(task: str) -> str:
        """Do ``task``."""
        if not release.is_set():
            await both.wait()
            await release.wait()
        return f"{task}: done"

    model = ReactiveLlm(model="reactive")
    async with SQLiteStore(str(tmp_path / "adk.db")) as store:
        service = SteerableSessionService(store)
        agent = LlmAgent(name="worker", model=model, tools=[work])
        runner = Runner(
            app=App(name="app", root_agent=agent, plugins=[SteeringPlugin(service)]),
            session_service=service,
        )
        for session in ("s1", "s2"):
            await service.create_session(app_name="app", user_id="u", session_id=session)
        runs = asyncio.gather(_run(runner, "s1", "one"), _run(runner, "s2", "two"))
        await asyncio.wait_for(both.wait(), 30)  # both runs are in their tool call
        await service.session(app_name="app", user_id="u", session_id="s1").steer(
            "one more", id="k1"
        )
        await service.session(app_name="app", user_id="u", session_id="s2").steer(
            "two more", id="k2"
        )
        release.set()
        finals = await asyncio.wait_for(runs, 30)
        await runner.close()
        stored = {
            s: await service.session(app_name="app", user_id="u", session_id=s).messages()
            for s in ("s1", "s2")
        }
    assert list(finals) == ["answered: one | one more", "answered: two | two more"]
    assert all(problems(request) == [] for request in model.requests)
    steered = {s: [(m.id, m.text) for m in stored[s] if m.steered] for s in stored}
    assert steered == {"s1": [("k1", "one more")], "s2": [("k2", "two more")]}


async def test_a_reader_of_a_running_session_loses_none_of_the_runs_events(
    tmp_path: Path,
) -> None:
    working, release = asyncio.Event(), asyncio.Event()

    async def work(task: str) -> str:
        """Do ``task``."""
        if not release.is_set():
            working.set()
            await release.wait()
        return f"{task}: done"

    model = ReactiveLlm(model="reactive")
    async with SQLiteStore(str(tmp_path / "adk.db")) as store:
        service = SteerableSessionService(store)
        agent = LlmAgent(name="worker", model=model, tools=[work])
        runner = Runner(
            app=App(name="app", root_agent=agent, plugins=[SteeringPlugin(service)]),
            session_service=service,
        )
        await service.create_session(app_name="app", user_id="u", session_id="s")
        run = asyncio.ensure_future(_run(runner, "s", "one"))
        await asyncio.wait_for(working.wait(), 30)
        # a UI reads the session while the run holds its call (not stored until the next step)
        seen = await service.get_session(app_name="app", user_id="u", session_id="s")
        await service.session(app_name="app", user_id="u", session_id="s").steer("one more", id="k")
        release.set()
        final = await asyncio.wait_for(run, 30)
        await runner.close()
        stored = await service.session(app_name="app", user_id="u", session_id="s").messages()
        again = await SteerableSessionService(store).get_session(
            app_name="app", user_id="u", session_id="s"
        )
    assert seen is not None and final == "answered: one | one more"
    assert again is not None
    loaded = [
        e.content.model_dump(mode="json", exclude_none=True) for e in again.events if e.content
    ]
    assert texts_of(loaded) == [
        "one",
        "call:call-1",
        "result:call-1",
        "one more",
        "call:call-4",
        "result:call-4",
        "answered: one | one more",
    ]
    assert [m.id for m in stored if m.steered] == ["k"]


async def test_a_second_run_of_a_running_session_is_refused_and_the_first_goes_on(
    tmp_path: Path,
) -> None:
    working, release, stuck = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def work(task: str) -> str:
        """Do ``task``."""
        if task == "three":  # the run the test cancels
            stuck.set()
            await asyncio.Event().wait()
        if not release.is_set():
            working.set()
            await release.wait()
        return f"{task}: done"

    model = ReactiveLlm(model="reactive")
    async with SQLiteStore(str(tmp_path / "adk.db")) as store:
        service = SteerableSessionService(store)
        agent = LlmAgent(name="worker", model=model, tools=[work])
        runner = Runner(
            app=App(name="app", root_agent=agent, plugins=[SteeringPlugin(service)]),
            session_service=service,
        )
        await service.create_session(app_name="app", user_id="u", session_id="s")
        first = asyncio.ensure_future(_run(runner, "s", "one"))
        await asyncio.wait_for(working.wait(), 30)
        # its prompt is refused (the session it read is behind the first run's held events)
        with pytest.raises(StaleSessionError, match="has a run already") as refused:
            await asyncio.wait_for(_run(runner, "s", "two"), 30)
        release.set()
        final = await asyncio.wait_for(first, 30)
        # a run cancelled in its tool call runs no callback: its hold ends with its task
        cancelled = asyncio.ensure_future(_run(runner, "s", "three"))
        await asyncio.wait_for(stuck.wait(), 30)
        cancelled.cancel()
        await asyncio.gather(cancelled, return_exceptions=True)
        again = await _run(runner, "s", "four")
        await runner.close()
    assert isinstance(refused.value, TranscriptConflict)
    assert final == "answered: one"
    # nothing of the refused run; the cancelled run's prompt, stored before its hold began
    assert again == "answered: one | three | four"
