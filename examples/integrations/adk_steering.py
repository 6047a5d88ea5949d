"""Steer a Google ADK agent while it works: keyless, in seconds, over a SQLite file.

    python examples/integrations/adk_steering.py [FILE.db]

An ``LlmAgent`` (a scripted model stands in for Gemini) looks up the weather in Paris. While
its tool runs, someone else (here another Session object on the same file, as another
process would) steers the session: "Rome instead". ADK's next model request has the steer
after the tool's result, the run goes on to look up Rome, and the stored session has every
event in the order it happened, the steer once, in place.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import AsyncGenerator
from pathlib import Path

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.genai import types

from steerable import Session
from steerable.integrations.adk import SteerableSessionService, SteeringPlugin
from steerable.stores.sqlite import SQLiteStore


class Scripted(BaseLlm):
    """Looks up the city the user's last text names, then answers (no key, no network)."""

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        """One reply: a lookup after a user's text, the answer after a result."""
        last = llm_request.contents[-1].parts or []
        print("  model asked, last:", " ".join(_word(p) for p in last))
        if last and last[-1].text:
            city = "Rome" if "Rome" in last[-1].text else "Paris"
            call = types.FunctionCall(name="weather", args={"city": city}, id=f"call-{city}")
            yield LlmResponse(
                content=types.Content(role="model", parts=[types.Part(function_call=call)]),
                usage_metadata=_USAGE,
            )
        else:
            yield LlmResponse(
                content=types.Content(role="model", parts=[types.Part(text="Rome: sunny")]),
                usage_metadata=_USAGE,
            )


# a real model reports its token usage; without it ADK logs a warning for every reply
_USAGE = types.GenerateContentResponseUsageMetadata(
    prompt_token_count=10, candidates_token_count=5, total_token_count=15
)


def _word(part: types.Part) -> str:
    if part.function_response is not None:
        return f"result({part.function_response.name})"
    return repr(part.text)


async def main(path: Path) -> None:
    """Run the agent once over ``path``, steering it during its first tool call."""
    async with SQLiteStore(str(path)) as store:
        service = SteerableSessionService(store)
        # the steerable session that keeps the ADK session, as another process opens it
        trip = Session(service.session(app_name="demo", user_id="me", session_id="trip").id, store)

        async def weather(city: str) -> str:
            """The weather in ``city``."""
            if city == "Paris":  # the user changes their mind while the tool runs
                await trip.steer("Rome instead, please", id="steer-1")
            return f"sunny in {city}"

        agent = LlmAgent(name="assistant", model=Scripted(model="scripted"), tools=[weather])
        runner = Runner(
            app=App(name="demo", root_agent=agent, plugins=[SteeringPlugin(service)]),
            session_service=service,
        )
        await service.create_session(app_name="demo", user_id="me", session_id="trip")
        prompt = types.Content(role="user", parts=[types.Part(text="Weather in Paris?")])
        async for event in runner.run_async(user_id="me", session_id="trip", new_message=prompt):
            if event.is_final_response():
                print(
                    "answer:",
                    event.content.parts[0].text if event.content and event.content.parts else "",
                )
        await runner.close()
        print("stored:")
        for message in await trip.messages():
            what = "steer" if message.steered else message.role
            shown = message.text or " ".join(getattr(p, "text", "") for p in message.parts)
            shown = shown or "(the ADK session's own fields)"
            print(f"  {what:9} {shown}")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as scratch:
        asyncio.run(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(scratch) / "adk.db"))
