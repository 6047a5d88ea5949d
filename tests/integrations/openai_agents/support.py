"""What the OpenAI Agents SDK tests share: a validity check, scripted models, an agent.

``item_problems`` is what OpenAI's APIs refuse in an input list: a function call whose
output does not come right after the calls of its response, or an output that answers no
call. ``replica_agent`` is the agent ``scripts/service_replica.py --agent`` serves in the
process tests: a model scripted by a responder that records each request it gets.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agents import Agent, TResponseInputItem, function_tool, set_tracing_disabled
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

from steerable.integrations.openai_agents import OpenAIAgentsAgent
from steerable.integrations.openai_agents._items import to_items
from steerable.messages import Message
from tests.service.replicas import until

set_tracing_disabled(True)  # nothing to export to: no key, no network


def item_problems(items: Sequence[Any]) -> list[str]:
    """What a provider would refuse in ``items``; empty when the list is valid."""
    problems: list[str] = []
    pending: list[str] = []  # the calls of the latest response, still to be answered
    calls_open = False  # True while the items are a response's run of calls
    for index, item in enumerate(items):
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "function_call":
            if not calls_open and pending:
                problems.append(f"item {index}: calls {pending} have no output before it")
                pending = []
            pending.append(item["call_id"])
            calls_open = True
            continue
        calls_open = False
        if kind == "function_call_output":
            if item["call_id"] in pending:
                pending.remove(item["call_id"])
            else:
                problems.append(f"item {index}: output for {item['call_id']!r} answers no call")
        elif pending:
            problems.append(f"item {index}: calls {pending} have no output before it")
            pending = []
    if pending:
        problems.append(f"the items end with calls {pending} unanswered")
    return problems


def stored_items(messages: Sequence[Message]) -> list[Any]:
    """The input items a stored transcript gives, in order (what a run rebuilds)."""
    return [item for message in messages for item in to_items(message)]


def user_texts(items: Sequence[Any]) -> list[str]:
    """The plain user items' texts (prompts and steers), in order."""
    return [
        i["content"]
        for i in items
        if isinstance(i, dict) and i.get("role") == "user" and isinstance(i["content"], str)
    ]


def kinds(items: Sequence[Any]) -> list[str]:
    """Each item as a short word: its type, or ``user:<text>`` for a plain user item."""
    return [
        f"user:{i['content']}" if i.get("role") == "user" else str(i.get("type", i.get("role")))
        for i in items
    ]


def calls_then_answer(*calls: str, answer: str = "done") -> list[Any]:
    """A script: one tool call per response (``look`` with each argument), then ``answer``."""
    steps: list[Any] = [
        [function_call("look", {"q": q}, call_id=f"call-{n}")] for n, q in enumerate(calls)
    ]
    return [*steps, [assistant_message(answer)]]


# -- the agent the replica processes serve -----------------------------------------------------


def _turn(items: Sequence[Any]) -> list[Any]:
    """The items of the running turn: those after the last answer (an assistant message)."""
    last = max(
        (
            n
            for n, i in enumerate(items)
            if i.get("type") == "message" and i.get("role") == "assistant"
        ),
        default=-1,
    )
    return list(items[last + 1 :])


def _responder(replica: str, path: str | None, calls: int, *, gated: bool = False) -> Any:
    def respond(call: ModelCall) -> list[Any]:
        items: list[TResponseInputItem] = list(call.input)
        mine = _turn(items)
        texts = user_texts(mine)
        if path is not None:
            line = {"replica": replica, "turn": texts[0] if texts else None, "items": mine}
            with open(path, "a", encoding="utf-8") as file:  # one write per line: atomic
                file.write(json.dumps(line) + "\n")
        done = sum(1 for i in mine if i.get("type") == "function_call_output")
        if done < calls:
            arguments = {"gate": done} if gated else {}  # the gate of the turn's call number
            return [function_call("work", arguments, call_id=f"{replica}-{os.urandom(4).hex()}")]
        return [assistant_message("answered: " + " | ".join(texts))]

    return respond


def replica_agent(args: argparse.Namespace) -> OpenAIAgentsAgent:
    """``--agent tests.integrations.openai_agents.support:replica_agent``: a tool that works
    ``args.seconds``, ``args.calls`` times a turn, then the answer; requests recorded."""
    seconds = float(args.seconds)

    @function_tool
    async def work() -> str:
        """Work for a while."""
        await asyncio.sleep(seconds)
        return "worked"

    respond = _responder(args.replica, args.requests, int(args.calls))
    model = ScriptedModel([ModelStep.respond(respond) for _ in range(10_000)])
    return OpenAIAgentsAgent(Agent(name="worker", model=model, tools=[work]), max_turns=10)


def gated_agent(args: argparse.Namespace) -> OpenAIAgentsAgent:
    """``--agent tests.integrations.openai_agents.support:gated_agent``: like
    :func:`replica_agent`, but the turn's call ``n`` returns only once the test has made the
    file ``gate-<n>`` beside the requests file (so a test knows which call a kill lands in)."""
    gates = Path(args.requests).parent

    @function_tool
    async def work(gate: int) -> str:
        """Work until the test opens this call's gate."""

        async def opened() -> bool:
            return (gates / f"gate-{gate}").exists()

        await until(opened, f"gate {gate} opened", seconds=600)  # a file: the test is elsewhere
        return "worked"

    respond = _responder(args.replica, args.requests, int(args.calls), gated=True)
    model = ScriptedModel([ModelStep.respond(respond) for _ in range(10_000)])
    return OpenAIAgentsAgent(Agent(name="worker", model=model, tools=[work]), max_turns=10)
