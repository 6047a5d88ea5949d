"""An OpenAI Agents SDK run that takes a steer mid-run, on SQLite, with no key.

    python examples/integrations/openai_agents_steering.py [path/to/file.db]

The agent looks up flights with a tool. While the tool runs, another task (it could be
another process or machine: anyone who can open the store) sends a steer. The SDK's run
goes on: its next model request carries the steer right after the tool's output, and the
transcript in the store has it there, once. The model is the SDK's own ``ScriptedModel``;
swap in a real one (``Agent(model="gpt-5-mini")``) and nothing else changes.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from steerable import open_session
from steerable.integrations.openai_agents import SteerableSession, steering
from steerable.stores.sqlite import SQLiteStore


def _line(item: Any) -> str:
    if item.get("role") == "user":
        return f"user: {item['content']}"
    if item.get("type") == "function_call":
        return f"tool call: {item['name']}({item['arguments']})"
    if item.get("type") == "function_call_output":
        return f"tool output: {item['output']}"
    return str(item.get("type"))


async def main(path: Path) -> None:
    """Run the agent once over the session ``trip`` of the SQLite file ``path``."""
    set_tracing_disabled(True)  # no key: nothing to export traces to
    async with SQLiteStore(path) as store:
        trip = open_session("trip", store)
        looking = asyncio.Event()

        @function_tool
        async def find_flights(to: str) -> str:
            """Find flights to a city."""
            looking.set()
            await asyncio.sleep(0.5)  # a slow search: time for a steer to arrive
            return f"3 flights to {to}: 08:10, 12:45, 19:30"

        async def someone_steers() -> None:
            await looking.wait()
            await trip.steer("only morning flights, please")

        model = ScriptedModel(
            [
                [function_call("find_flights", {"to": "Lisbon"}, call_id="call-1")],
                [assistant_message("The 08:10 flight to Lisbon is the morning one.")],
            ]
        )
        agent = Agent(name="travel", model=model, tools=[find_flights])
        session = SteerableSession(trip)
        steering_task = asyncio.create_task(someone_steers())
        result = await Runner.run(
            agent, "Find me a flight to Lisbon", run_config=steering(session), session=session
        )
        await steering_task
        print("the second model request:")
        for item in model.calls[1].input:
            print("  " + _line(item))
        print("answer:", result.final_output)
        print("stored in the session:")
        for message in await trip.messages():
            part = message.parts[0]
            kind = "steer" if message.steered else type(part).__name__
            print(f"  {message.role} [{kind}]: {getattr(part, 'text', '')}")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as scratch:
        target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(scratch) / "trip.db"
        asyncio.run(main(target))
