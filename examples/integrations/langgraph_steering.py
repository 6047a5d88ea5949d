"""Steer a LangGraph agent while it works: keyless, in seconds, over a SQLite file.

    python examples/integrations/langgraph_steering.py [FILE.db]

A ``create_agent`` agent (a scripted chat model stands in for a real one) looks up the
weather in Paris. While its tool runs, someone else (here another Session object on the
same file, as another process would) steers the session: "Rome instead". The next model
request has the steer right after the tool's result, the same run goes on to look up Rome,
and the steerable transcript has every message in order, the steer once, in place.
Swap the scripted model for a real one (``init_chat_model("openai:gpt-5-mini")``).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool

from steerable import Native, Session
from steerable.integrations.langgraph import SteerableSaver, SteeringMiddleware
from steerable.stores.sqlite import SQLiteStore


class ScriptedModel(BaseChatModel):
    """Looks up the city the latest user message names, then answers with what it found."""

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        """The rules know the one tool."""
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        raise NotImplementedError("async only: run the graph with ainvoke")

    async def _agenerate(self, messages: list[BaseMessage], *a: Any, **k: Any) -> ChatResult:
        last_user = next(m for m in reversed(messages) if isinstance(m, HumanMessage))
        city = "Rome" if "Rome" in last_user.text else "Paris"
        looked = [m for m in messages if isinstance(m, ToolMessage) and city in m.text]
        if looked:
            reply = AIMessage(f"It is {looked[-1].text} in {city}.")
        else:
            call = {"name": "weather", "args": {"city": city}, "id": f"call-{city}"}
            reply = AIMessage("", tool_calls=[{**call, "type": "tool_call"}])
        return ChatResult(generations=[ChatGeneration(message=reply)])


async def main(path: Path) -> None:
    """Run the agent over ``path``; steer it during its first tool call."""
    async with SQLiteStore(path) as store:
        someone_else = Session("trip", store)  # another program would open the same file

        @tool
        async def weather(city: str) -> str:
            """The weather in ``city``."""
            if city == "Paris":
                await someone_else.steer("Rome instead, please", id="rome")
            return {"Paris": "rainy, 14°C", "Rome": "sunny, 24°C"}[city] + f" ({city})"

        # one graph for every session: a run's session is its thread_id
        agent = create_agent(
            ScriptedModel(),
            [weather],
            middleware=[SteeringMiddleware(store)],
            checkpointer=SteerableSaver(store),
        )
        config: Any = {"configurable": {"thread_id": "trip"}}
        prompt = HumanMessage("What's the weather in Paris?", id="ask")
        state = await agent.ainvoke({"messages": [prompt]}, config)
        # after a crash, resume the thread: await agent.ainvoke(None, config)
        print("answer:", state["messages"][-1].text)
        print("stored transcript:")
        for message in await Session("trip", store).messages():
            native = any(isinstance(p, Native) for p in message.parts)
            kind = "langgraph record" if native else ("steer" if message.steered else "user")
            text = message.text or next(p.text for p in message.parts if isinstance(p, Native))
            print(f"  {message.role:9} {kind:16} {text or '(tool call)'}")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as directory:
        target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(directory) / "trip.db"
        asyncio.run(main(target))
