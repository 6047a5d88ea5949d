"""An ADK run killed mid-tool in a process of its own, and the retries of it.

    python -m tests.integrations.adk.crashing_run STORE_URL REQUESTS RAN MODE [FLAG...]

An ADK ``Runner`` over :class:`SteerableSessionService` (with :class:`SteeringPlugin`, unless
the flag ``plain``; an App with ``ResumabilityConfig(is_resumable=True)`` with the flag
``resumable``) on the store STORE_URL names, session ``("app", "u", "s")``. The model
(:class:`PlanningLlm`) calls ``fetch``, then ``book``, then answers; every request is
appended to REQUESTS, and every tool's start and end to RAN, one line each, with the prompt
ADK shows callbacks (``user_content``) at each model call. MODE:

- ``first``: creates the session and runs the prompt ``"plan my week"``. ``fetch`` prints
  ``in-fetch`` and waits for a line on stdin (the test steers meanwhile, from its own
  process); ``book`` prints ``in-book`` and waits for ever: the test SIGKILLs the process.
- any of :data:`RETRIES`: :func:`retry`, then one JSON line: the final text and the
  invocation ids of the events the run yielded.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncGenerator
from typing import Any, TypedDict

from google.adk.agents import LlmAgent
from google.adk.agents.callback_context import CallbackContext
from google.adk.apps import App, ResumabilityConfig
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.genai import types

from steerable.integrations.adk import SteerableSessionService, SteeringPlugin
from steerable.store import Store
from steerable.stores.url import open_url
from tests.integrations.adk.scripted import ScriptedLlm, call, say, texts_of

PROMPT = "plan my week"


class Address(TypedDict):
    """An ADK session's address, as its service's verbs take it."""

    app_name: str
    user_id: str
    session_id: str


ADDRESS = Address(app_name="app", user_id="u", session_id="s")
# resume: the docs' retry, the invocation of the last stored event and no new message;
# wrong-id and no-id: another invocation id, or none; prompt-again: the prompt, no id;
# prompt-and-id: the prompt and the invocation id
RETRIES = ("resume", "wrong-id", "no-id", "prompt-again", "prompt-and-id")


class PlanningLlm(ScriptedLlm):
    """Answers from the request alone, so a retry asks as the first run did: ``fetch``
    until its result is in, then ``book`` until its result is in, then the answer, which
    names every user text of the request."""

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        """Record the request, then call the next tool or answer."""
        contents = [c.model_dump(mode="json", exclude_none=True) for c in llm_request.contents]
        self.record(contents)
        words = texts_of(contents)
        if "result:fetch-1" not in words:
            yield call("fetch", "fetch-1", what="the calendar")
        elif "result:book-1" not in words:
            yield call("book", "book-1", slot="monday")
        else:
            said = [
                part["text"]
                for content in contents
                if content.get("role") == "user"
                for part in content["parts"]
                if "text" in part
            ]
            yield say("answered: " + " | ".join(said))


def runner(store: Store, requests: str, ran: str, *, first: bool, flags: tuple[str, ...]) -> Runner:
    """The runner of the module docstring over ``store``: a fresh service, model and app."""

    async def fetch(what: str) -> str:
        """Fetch ``what``."""
        _note(ran, "fetch:start")
        if first:
            print("in-fetch", flush=True)
            await asyncio.to_thread(sys.stdin.readline)  # the test steers meanwhile
        _note(ran, "fetch:end")
        return f"{what}: fetched"

    async def book(slot: str) -> str:
        """Book ``slot``."""
        _note(ran, "book:start")
        if first:
            print("in-book", flush=True)
            await asyncio.Event().wait()  # killed here
        _note(ran, "book:end")
        return f"{slot}: booked"

    def note_user_content(callback_context: CallbackContext, llm_request: LlmRequest) -> None:
        started = callback_context.user_content
        shown = texts_of([started.model_dump(mode="json", exclude_none=True)]) if started else []
        _note(ran, "user_content:" + (shown[0] if shown else "-"))

    model = PlanningLlm(model="planning", record_to=requests, replica="first" if first else "retry")
    service = SteerableSessionService(store)
    planner = LlmAgent(
        name="planner", model=model, tools=[fetch, book], before_model_callback=note_user_content
    )
    app = App(
        name="app",
        root_agent=planner,
        plugins=[] if "plain" in flags else [SteeringPlugin(service)],
        # given only when asked for: ADK warns that it is experimental
        resumability_config=ResumabilityConfig(is_resumable=True) if "resumable" in flags else None,
    )
    return Runner(app=app, session_service=service)


def _note(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as file:
        file.write(line + "\n")


def _prompt() -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=PROMPT)])


async def retry(
    store: Store, requests: str, ran: str, mode: str, flags: tuple[str, ...]
) -> dict[str, Any]:
    """Carry the killed run on as ``mode`` says; its final text and its events' invocations."""
    if mode not in RETRIES:
        raise ValueError(f"no retry {mode!r}: one of {RETRIES}")
    carry = runner(store, requests, ran, first=False, flags=flags)
    options: dict[str, Any] = {"new_message": _prompt()}
    if mode != "prompt-again":
        session = await carry.session_service.get_session(**ADDRESS)
        assert session is not None, "the killed run's session is stored"
        crashed = session.events[-1].invocation_id
        invocation = {"wrong-id": "not-the-crashed-one", "no-id": None}.get(mode, crashed)
        prompt = _prompt() if mode == "prompt-and-id" else None
        options = {"invocation_id": invocation, "new_message": prompt}
    final, invocations = "", set()
    async for event in carry.run_async(user_id="u", session_id="s", **options):
        invocations.add(event.invocation_id)
        if event.is_final_response() and event.content and event.content.parts:
            final = event.content.parts[0].text or final
    await carry.close()
    return {"final": final, "invocations": sorted(invocations)}


async def main(url: str, requests: str, ran: str, mode: str, *flags: str) -> None:
    """Run, or retry, as MODE says (see the module docstring)."""
    async with open_url(url) as store:
        if mode != "first":
            print(json.dumps(await retry(store, requests, ran, mode, flags)), flush=True)
            return
        first = runner(store, requests, ran, first=True, flags=flags)
        await first.session_service.create_session(**ADDRESS)
        async for _ in first.run_async(user_id="u", session_id="s", new_message=_prompt()):
            pass
    raise SystemExit("the first run was to be killed in book")


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
