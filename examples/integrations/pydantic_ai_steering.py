"""A steer landing in a running Pydantic AI agent, in place: no key, SQLite, a few seconds.

    python examples/integrations/pydantic_ai_steering.py

The agent (a FunctionModel: no provider, no key) looks up the weather with a tool. While the
tool runs, another process would steer the session; here a task does it, through the same
SQLite file. The model's next request carries the steer right after the tool's result, and
the stored transcript has it once, in place.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from steerable import Session
from steerable.integrations.pydantic_ai import Steering
from steerable.stores.sqlite import SQLiteStore


def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Calls the tool once, then answers with the last thing the user said."""
    said = [p.content for m in messages for p in m.parts if p.part_kind == "user-prompt"]
    print(f"model request {sum(isinstance(m, ModelResponse) for m in messages) + 1}: {said}")
    if not any(isinstance(m, ModelResponse) for m in messages):
        return ModelResponse(parts=[ToolCallPart("weather", {"city": "Paris"})])
    return ModelResponse(parts=[TextPart(f"Noted: {said[-1]}")])


async def main() -> None:
    """Run the agent while a steer arrives during its tool call."""
    path = Path(tempfile.mkdtemp()) / "example.db"

    async with SQLiteStore(path) as store:
        # one Steering for the agent: each run is stored (and steered) on the session its
        # conversation_id names, starting from what is stored there
        agent = Agent(FunctionModel(model), capabilities=[Steering(store)])

        @agent.tool_plain
        async def weather(city: str) -> str:
            """The weather in ``city``."""
            async with SQLiteStore(path) as elsewhere:  # another connection, as another process
                await Session("trip", elsewhere).steer("Actually, Rome, not Paris.")
            return f"{city}: sunny"

        result = await agent.run("Weather for my trip?", conversation_id="trip")
        # after a crash, the same call with no prompt goes on from the last stored step:
        # await agent.run(None, conversation_id="trip")
        print("answer:", result.output)
        print("stored:")
        for message in await Session("trip", store).messages():
            kind = "steer" if message.steered else message.role
            native = message.parts[-1]  # Pydantic AI's own record, and what a person reads of it
            print(f"  {kind:9} {message.text or getattr(native, 'text', '')}")


if __name__ == "__main__":
    asyncio.run(main())
