"""The Pydantic AI agent the replica processes serve (``--agent`` of the replica script).

``weather_agent(args)``: a FunctionModel that calls the ``work`` tool once per turn (it
sleeps ``args.seconds``), then answers ``answered: PROMPT | STEER ...``; every request is
appended to ``args.requests`` as a JSON line: ``replica`` and ``view`` (see support.view).
"""

from __future__ import annotations

import argparse
import asyncio
import json

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from steerable.integrations.pydantic_ai import PydanticAIAgent
from tests.integrations.pydantic_ai.support import call, say, view


def _asked(messages: list[ModelMessage]) -> list[str]:
    """The user texts since the last answer: the turn's prompt and its steers."""
    texts: list[str] = []
    for message in messages:
        if isinstance(message, ModelResponse) and message.text:
            texts = []
        for part in message.parts:
            if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                texts.append(part.content)
    return texts


def weather_agent(args: argparse.Namespace) -> PydanticAIAgent:
    """The agent of one replica process."""

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if args.requests:
            line = {"replica": args.replica, "view": view(messages)}
            with open(args.requests, "a", encoding="utf-8") as file:  # one line: atomic append
                file.write(json.dumps(line) + "\n")
        if any(isinstance(p, ToolReturnPart) for p in messages[-1].parts):
            return say("answered: " + " | ".join(_asked(messages)))
        return call("work", f"call-{len(messages)}")

    agent = Agent(FunctionModel(answer))

    @agent.tool_plain
    async def work() -> str:
        """Some work that takes a while."""
        await asyncio.sleep(args.seconds)
        return "done"

    return PydanticAIAgent(agent)
