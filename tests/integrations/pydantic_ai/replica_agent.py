"""The Pydantic AI agent the replica processes serve (``--agent`` of the replica script).

``weather_agent(args)``: a FunctionModel that calls the ``work`` tool ``args.calls`` times a
turn (it sleeps ``args.seconds``), then answers ``answered: PROMPT | STEER ...``; every
request is appended to ``args.requests`` as a JSON line: ``replica``, ``resumed`` (the
turn's :attr:`~steerable.service.Turn.resumed`), ``view`` (see support.view) and
``problems`` (what a provider would refuse in it, see support.problems).
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import json

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from steerable.integrations.pydantic_ai import PydanticAIAgent
from steerable.service import Turn
from steerable.service_store import Outcome
from tests.integrations.pydantic_ai.support import call, problems, say, view

_resumed: contextvars.ContextVar[bool] = contextvars.ContextVar("resumed", default=False)


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


def _returns(messages: list[ModelMessage]) -> int:
    """The tool returns since the last answer: the calls this turn made so far."""
    count = 0
    for message in messages:
        if isinstance(message, ModelResponse) and message.text:
            count = 0
        count += sum(isinstance(p, ToolReturnPart) for p in message.parts)
    return count


class _Recorded(PydanticAIAgent):
    """PydanticAIAgent that lets the model's records say whether the turn was resumed."""

    async def run_turn(self, turn: Turn) -> Outcome:
        """The turn, with its ``resumed`` flag in the context the model runs in."""
        _resumed.set(turn.resumed)
        return await super().run_turn(turn)


def weather_agent(args: argparse.Namespace) -> PydanticAIAgent:
    """The agent of one replica process."""

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if args.requests:
            line = {
                "replica": args.replica,
                "resumed": _resumed.get(),
                "view": view(messages),
                "problems": problems(messages),
            }
            with open(args.requests, "a", encoding="utf-8") as file:  # one line: atomic append
                file.write(json.dumps(line) + "\n")
        made = _returns(messages)
        if made >= args.calls:
            return say("answered: " + " | ".join(_asked(messages)))
        return call("work", f"call-{made + 1}")

    agent = Agent(FunctionModel(answer))

    @agent.tool_plain
    async def work() -> str:
        """Some work that takes a while."""
        await asyncio.sleep(args.seconds)
        return "done"

    return _Recorded(agent)
