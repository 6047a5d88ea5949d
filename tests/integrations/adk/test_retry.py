"""The retry after a crash, outside the service: ADK's own resume, the steer once.

A run dies right after the step that took a steer was stored (its task cancelled while the
model is asked: no callback of ADK's or the plugin's runs, as when the process is killed).
A new service and runner over the same store (as a new process) read the session, take the
invocation of its last event and resume it with ``run_async(invocation_id=...,
new_message=None)``: the retried request is the one that died, the steer in it once, and the
stored transcript has the steer once. Giving the prompt again instead starts a new
invocation that answers it twice (the second test, which shows why the docs say resume).
"""

from __future__ import annotations

import asyncio

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.runners import Runner

from steerable.integrations.adk import SteerableSessionService, SteeringPlugin
from steerable.store import Store
from tests.integrations.adk.replica_agent import ReactiveLlm
from tests.integrations.adk.scripted import ScriptedLlm, problems, texts_of
from tests.integrations.adk.test_steering import user_content


async def work(task: str) -> str:
    """Do ``task``."""
    return f"{task}: done"


def _runner(service: SteerableSessionService, model: ScriptedLlm) -> Runner:
    agent = LlmAgent(name="worker", model=model, tools=[work])
    app = App(name="app", root_agent=agent, plugins=[SteeringPlugin(service)])
    return Runner(app=app, session_service=service)


async def _crash_after_the_steer_is_taken(store: Store) -> list[list[str]]:
    """Run until the request with the steer goes out, then die; the requests asked."""
    service = SteerableSessionService(store)
    await service.create_session(app_name="app", user_id="u", session_id="s")
    await service.session(app_name="app", user_id="u", session_id="s").steer("skip friday")
    asked = asyncio.Event()

    async def hang(_: int) -> None:  # the request is out: its step (and the steer) is stored
        asked.set()
        await asyncio.Event().wait()

    model = ScriptedLlm(model="scripted", hook=hang)
    runner = _runner(service, model)

    async def run() -> None:
        async for _ in runner.run_async(
            user_id="u", session_id="s", new_message=user_content("plan my week")
        ):
            pass

    crashing = asyncio.ensure_future(run())
    await asyncio.wait_for(asked.wait(), 30)
    crashing.cancel()
    await asyncio.gather(crashing, return_exceptions=True)
    await runner.close()
    return [texts_of(request) for request in model.requests]


async def test_a_retry_resumes_the_invocation_and_sees_the_steer_once(store: Store) -> None:
    died = await _crash_after_the_steer_is_taken(store)
    service = SteerableSessionService(store)  # a new process: nothing of the first
    session = await service.get_session(app_name="app", user_id="u", session_id="s")
    assert session is not None
    model = ReactiveLlm(model="reactive")
    runner = _runner(service, model)
    final = ""
    async for event in runner.run_async(
        user_id="u",
        session_id="s",
        invocation_id=session.events[-1].invocation_id,
        new_message=None,
    ):
        if event.is_final_response() and event.content and event.content.parts:
            final = event.content.parts[0].text or final
    await runner.close()
    stored = await service.session(app_name="app", user_id="u", session_id="s").messages()
    retried = [texts_of(request) for request in model.requests]
    assert died == [["plan my week", "skip friday"]]  # it waited before the run: the first step
    assert retried[0] == died[0]
    assert all(words.count("skip friday") == 1 for words in retried)
    assert final == "answered: plan my week | skip friday"
    assert [m.text for m in stored if m.steered] == ["skip friday"]
    assert all(problems(request) == [] for request in model.requests)


async def test_the_prompt_given_again_is_answered_twice(store: Store) -> None:
    await _crash_after_the_steer_is_taken(store)
    service = SteerableSessionService(store)
    model = ReactiveLlm(model="reactive")
    runner = _runner(service, model)
    async for _ in runner.run_async(
        user_id="u", session_id="s", new_message=user_content("plan my week")
    ):
        pass
    await runner.close()
    assert texts_of(model.requests[0]).count("plan my week") == 2
