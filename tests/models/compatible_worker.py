"""One turn with two tools against a local Chat Completions server, stored in SQLite.

``python -m tests.models.compatible_worker run MODE BASE_URL DATABASE GATES`` starts the
turn (or carries on the one the stored transcript left halfway) and prints the answer;
``... steer DATABASE TEXT`` steers the session from a process of its own. Each tool writes
``GATES/<name>-started`` and waits for ``GATES/<name>-go``, so the test knows where the
turn is when it steers or kills it.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from steerable import Runner, Spec, Tool, tool, user
from steerable.models.registry import ProviderModel, model_from_string
from steerable.session import open_session
from steerable.stores.sqlite import SQLiteStore

SESSION = "conversation"
PROMPT = "find the config and read it"


def make_model(mode: str, base_url: str) -> ProviderModel:
    """The settings each kind of server needs: a strict one wants tool_choice, no stream."""
    if mode == "strict":
        return model_from_string(
            "openai:m", base_url=base_url, api_key="test", tool_choice="auto", stream=False
        )
    return model_from_string("openai:m", base_url=base_url, api_key="test")


def gated(gates: Path) -> list[Tool]:
    async def wait(name: str) -> None:
        (gates / f"{name}-started").touch()
        for _ in range(1200):  # a minute at most, so a broken test cannot hang here
            if (gates / f"{name}-go").exists():
                return
            await asyncio.sleep(0.05)

    @tool
    async def search(q: str) -> str:
        """Search the files."""
        await wait("search")
        return f"found {q}.toml"

    @tool
    async def read(path: str) -> str:
        """Read a file."""
        await wait("read")
        return f"{path}: 12 lines"

    return [search, read]


async def run(mode: str, base_url: str, database: Path, gates: Path) -> int:
    async with SQLiteStore(database) as store, make_model(mode, base_url) as model:
        session = open_session(SESSION, store)
        messages = await session.messages()
        if not messages:
            messages.append(user(PROMPT, id="prompt"))
        spec = Spec(tools=gated(gates), session=session)
        result = await Runner.run(spec, messages, model)
    print(f"{result.reason}: {result.output or result.error}")
    return 0 if result.reason == "completed" else 1


async def steer(database: Path, text: str) -> None:
    async with SQLiteStore(database) as store:
        await open_session(SESSION, store).steer(text, id="steer-1")


if __name__ == "__main__":
    verb, *args = sys.argv[1:]
    if verb == "steer":
        asyncio.run(steer(Path(args[0]), args[1]))
    else:
        sys.exit(asyncio.run(run(args[0], args[1], Path(args[2]), Path(args[3]))))
