"""A run that a test kills: ``python -m tests.integrations.openai_agents.crashing_run URL MODE``.

It runs an SDK agent on session ``s`` of the store at URL: given ``session=`` alone (MODE
``plain``) or also ``run_config=steering(session)`` (MODE ``steered``). Its tool prints each
call (``in-1``, ``in-2``); the first waits for a line on stdin, the second blocks until the
process is killed.
"""

from __future__ import annotations

import asyncio
import sys

from agents import Agent, Runner, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from steerable import open_session
from steerable.integrations.openai_agents import SteerableSession, steering
from steerable.stores.url import open_url
from tests.integrations.openai_agents import support  # noqa: F401 (no tracing export)


async def main(url: str, mode: str) -> None:
    """Run until killed (the second tool call never returns)."""
    calls = 0

    @function_tool
    async def work() -> str:
        """Some work."""
        nonlocal calls
        calls += 1
        print(f"in-{calls}", flush=True)
        if calls > 1:
            await asyncio.Event().wait()  # until killed
        await asyncio.to_thread(sys.stdin.readline)
        return "worked"

    model = ScriptedModel(
        [
            [function_call("work", {}, call_id="c1")],
            [function_call("work", {}, call_id="c2")],
            [assistant_message("never")],
        ]
    )
    agent = Agent(name="a", model=model, tools=[work])
    async with open_url(url) as store:
        session = SteerableSession(open_session("s", store))
        config = steering(session) if mode == "steered" else None
        await Runner.run(agent, "hi", session=session, run_config=config)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
