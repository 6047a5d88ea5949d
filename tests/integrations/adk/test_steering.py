"""ADK takes a steer at its next model call, in place, once; the run goes on."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from google.adk.agents import LlmAgent, SequentialAgent
from google.adk.apps import App
from google.adk.runners import Runner
from google.genai import types

from steerable.integrations.adk import SteerableSessionService, SteeringPlugin
from steerable.integrations.adk._index import session_key
from steerable.stores.sqlite import SQLiteStore
from tests.integrations.adk.scripted import ScriptedLlm, call, problems, say, texts_of

# Opens the test's SQLite file in a process of its own and steers the session there.
STEER = """
import asyncio, sys
from steerable import Session
from steerable.stores.sqlite import SQLiteStore

async def main():
    async with SQLiteStore(sys.argv[1]) as store:
        await Session(sys.argv[2], store).steer(sys.argv[3], id=sys.argv[4])

asyncio.run(main())
"""


def steer_from_another_process(path: Path, session: str, text: str, id: str) -> None:
    """Leave a steer in ``session`` of the SQLite file ``path``, from a child process."""
    subprocess.run([sys.executable, "-c", STEER, str(path), session, text, id], check=True)


def user_content(text: str) -> types.Content:
    """The user's message ``text``."""
    return types.Content(role="user", parts=[types.Part(text=text)])


async def test_a_steer_sent_during_a_tool_call_is_in_the_next_request_once_in_place(
    tmp_path: Path,
) -> None:
    path = tmp_path / "adk.db"
    calls: list[str] = []

    async def lookup(city: str) -> str:
        """The weather in ``city``."""
        calls.append(city)
        if city == "Paris":  # the first call: the user changes their mind meanwhile
            key = session_key("app", "u", "s")  # where the ADK session "s" of app and u is kept
            await asyncio.to_thread(steer_from_another_process, path, key, "Rome instead", "st-1")
        return f"sunny in {city}"

    model = ScriptedLlm(
        model="scripted",
        script=[
            call("lookup", "c1", city="Paris"),
            call("lookup", "c2", city="Rome"),
            say("Rome: sunny"),
        ],
    )
    async with SQLiteStore(str(path)) as store:
        service = SteerableSessionService(store)
        agent = LlmAgent(name="weather", model=model, tools=[lookup])
        app = App(name="app", root_agent=agent, plugins=[SteeringPlugin(service)])
        runner = Runner(app=app, session_service=service)
        await service.create_session(app_name="app", user_id="u", session_id="s")
        events = [
            event
            async for event in runner.run_async(
                user_id="u", session_id="s", new_message=user_content("Paris?")
            )
        ]
        await runner.close()

        # the very next request has it after the function response, once; later ones keep it
        assert texts_of(model.requests[0]) == ["Paris?"]
        assert texts_of(model.requests[1]) == ["Paris?", "call:c1", "result:c1", "Rome instead"]
        assert texts_of(model.requests[2]) == [
            "Paris?",
            "call:c1",
            "result:c1",
            "Rome instead",
            "call:c2",
            "result:c2",
        ]
        assert all(problems(request) == [] for request in model.requests)
        # the run was not restarted: three model calls, two tool calls, one invocation
        assert len(model.requests) == 3 and calls == ["Paris", "Rome"]
        assert len({event.invocation_id for event in events}) == 1

        # in storage: once, in place, as the steered user message the take recorded
        stored = (
            await SteerableSessionService(store)
            .session(app_name="app", user_id="u", session_id="s")
            .messages()
        )
        steered = [m for m in stored if m.steered]
        assert [(m.id, m.text) for m in steered] == [("st-1", "Rome instead")]
        assert [m.id for m in stored].index("st-1") == 4  # header, prompt, call, result, steer
        assert await service.session(app_name="app", user_id="u", session_id="s").steers() == []

        # and a session loaded again from the store has every event in the run's order
        again = await SteerableSessionService(store).get_session(
            app_name="app", user_id="u", session_id="s"
        )
        assert again is not None
        loaded = [
            e.content.model_dump(mode="json", exclude_none=True) for e in again.events if e.content
        ]
        assert texts_of(loaded) == [*texts_of(model.requests[2]), "Rome: sunny"]


@pytest.mark.filterwarnings("ignore:SequentialAgent is deprecated:DeprecationWarning")
async def test_under_a_workflow_root_the_plugin_takes_no_steer_and_stores_the_steps(
    tmp_path: Path,
) -> None:
    async def lookup(city: str) -> str:
        """The weather in ``city``."""
        await service.session(app_name="app", user_id="u", session_id="s").steer(
            "Rome instead", id="st-1"
        )
        return f"sunny in {city}"

    model = ScriptedLlm(model="scripted", script=[call("lookup", "c1", city="Paris"), say("sunny")])
    async with SQLiteStore(str(tmp_path / "adk.db")) as store:
        service = SteerableSessionService(store)
        step = LlmAgent(name="weather", model=model, tools=[lookup])
        app = App(
            name="app",
            root_agent=SequentialAgent(name="flow", sub_agents=[step]),
            plugins=[SteeringPlugin(service)],
        )
        runner = Runner(app=app, session_service=service)
        await service.create_session(app_name="app", user_id="u", session_id="s")
        async for _ in runner.run_async(
            user_id="u", session_id="s", new_message=user_content("Paris?")
        ):
            pass
        await runner.close()
        stored = await service.session(app_name="app", user_id="u", session_id="s").messages()
        waiting = await service.session(app_name="app", user_id="u", session_id="s").steers()
    assert [texts_of(r) for r in model.requests] == [["Paris?"], ["Paris?", "call:c1", "result:c1"]]
    assert [s.id for s in waiting] == ["st-1"]  # left for the next run
    assert len(stored) == 5 and not any(m.steered for m in stored)  # header, prompt, 3 events
