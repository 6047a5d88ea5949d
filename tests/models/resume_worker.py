"""Turns of one conversation, stored in SQLite, against a local wire server.

``python -m tests.models.resume_worker PROVIDER BASE_URL DATABASE TURN...`` runs the given
turns and exits; the test runs the same turns in one go in its own process, and in two
processes, and compares what the provider was sent.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from steerable import Runner, Spec, Tool, tool, user
from steerable.models.registry import ProviderModel, model_from_string
from steerable.session import Session, open_session
from steerable.stores.sqlite import SQLiteStore

PROMPTS = {1: "find the config", 2: "now summarise it"}
STEER = "and the tests"


def make_model(provider: str, base_url: str) -> ProviderModel:
    spec = {"chat": "openai-chat:m", "responses": "openai-responses:m", "anthropic": "anthropic:m"}
    return model_from_string(spec[provider], base_url=base_url, api_key="test")


def tools(session: Session) -> list[Tool]:
    @tool
    async def search(q: str) -> str:
        """Search the files."""
        await session.steer(STEER, id="steer-1")  # taken at the next step, after this result
        return f"found {q}"

    return [search]


async def run_turns(provider: str, base_url: str, database: Path, turns: list[int]) -> None:
    async with SQLiteStore(database) as store, make_model(provider, base_url) as model:
        session = open_session("conversation", store)
        spec = Spec(tools=tools(session), session=session, instructions="Be brief.")
        for turn in turns:
            messages = await session.messages()
            messages.append(user(PROMPTS[turn], id=f"prompt-{turn}"))
            result = await Runner.run(spec, messages, model)
            assert result.reason == "completed", result.error


if __name__ == "__main__":
    name, url, path, *numbers = sys.argv[1:]
    asyncio.run(run_turns(name, url, Path(path), [int(n) for n in numbers]))
