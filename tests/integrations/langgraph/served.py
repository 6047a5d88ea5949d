"""The LangGraph agent the replica processes serve (``--agent ...served:agent``).

``agent(args)`` gets ``scripts/service_replica.py``'s arguments: the tool ``work`` sleeps
``args.seconds``; the model calls it ``args.calls`` times a turn and appends every request
to ``args.requests`` (the harness's layout, so its helpers read them).
"""

from __future__ import annotations

import argparse
import asyncio

from steerable.integrations.langgraph import LangGraphAgent
from tests.integrations.langgraph.chat import ScriptedChat
from tests.integrations.langgraph.support import work_tool


def agent(args: argparse.Namespace) -> LangGraphAgent:
    """A ``create_agent`` turn per send: ``args.calls`` rounds of ``work``, then the answer."""

    async def work() -> None:
        await asyncio.sleep(args.seconds)

    model = ScriptedChat(rounds=args.calls, record_to=args.requests, replica=args.replica)
    return LangGraphAgent(model, [work_tool(work)], steers_per_turn=args.steers_per_turn)
