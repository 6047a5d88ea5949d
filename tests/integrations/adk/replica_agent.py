"""The ADK agent the replica processes serve (``--agent ...replica_agent:weather_agent``).

Its model answers from what the request holds, so a replica that carries a turn on answers
as the first would have: a request that ends with a user's text (a prompt, a steer) gets a
call of the ``work`` tool, one that ends with the tool's result gets the answer, which names
every user text of the request. A request that ends with a steer waits ``--model-delay``
seconds first (a test kills the replica then: right after the step that took the steer was
stored). Every request is recorded to ``--requests`` as one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncGenerator
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse

from steerable.integrations.adk import ADKAgent
from tests.integrations.adk.scripted import ScriptedLlm, call, say


class ReactiveLlm(ScriptedLlm):
    """Calls ``work`` after a user's text, answers after its result (see the module)."""

    delay: float = 0.0

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        """Record the request, then call the tool or answer."""
        contents = [c.model_dump(mode="json", exclude_none=True) for c in llm_request.contents]
        self.record(contents)
        last = contents[-1]["parts"][-1] if contents and contents[-1].get("parts") else {}
        if "text" in last:
            if len(contents) > 1:  # a steer: the step that took it is stored by now
                await asyncio.sleep(self.delay)
            yield call("work", f"call-{len(contents)}", task=last["text"])
            return
        said = [
            part["text"]
            for content in contents
            if content.get("role") == "user"
            for part in content["parts"]
            if "text" in part
        ]
        yield say("answered: " + " | ".join(said))


def weather_agent(args: argparse.Namespace) -> ADKAgent:
    """The replica's agent: ``work`` takes ``--seconds``; see the module for the model."""
    seconds: float = args.seconds

    async def work(task: str) -> str:
        """Do ``task``."""
        await asyncio.sleep(seconds)
        return f"{task}: done"

    options: dict[str, Any] = {"record_to": args.requests, "replica": args.replica}
    model = ReactiveLlm(model="reactive", delay=args.model_delay, **options)
    return ADKAgent(LlmAgent(name="worker", model=model, tools=[work]))
