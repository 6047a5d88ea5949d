"""What the LangGraph tests share: the ``work`` tool, a steer from another process, views.

A steer "from another process" is one: a child Python that opens the same SQLite file and
calls :meth:`steerable.Session.steer`, as a user's other program would.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.tools import StructuredTool

from steerable.messages import Message, Native

ROOT = Path(__file__).resolve().parents[3]

_STEER = """
import asyncio, sys
from steerable.session import Session
from steerable.stores.sqlite import SQLiteStore

async def main():
    path, session, text, id = sys.argv[1:]
    async with SQLiteStore(path) as store:
        await Session(session, store).steer(text, id=id)

asyncio.run(main())
"""


async def steer_from_another_process(path: Path, session: str, text: str, id: str) -> None:
    """Leave a steer through the SQLite file ``path`` from a child process; wait for it."""
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _STEER, str(path), session, text, id, cwd=ROOT
    )
    assert await child.wait() == 0


def work_tool(during: Callable[[], Awaitable[None]] | None = None) -> StructuredTool:
    """The tool ``work`` the scripted model calls; ``during`` runs while it works."""

    async def work() -> str:
        if during is not None:
            await during()
        return "worked"

    return StructuredTool.from_function(coroutine=work, name="work", description="Do work.")


def ids(messages: list[BaseMessage]) -> list[str | None]:
    """The ids of ``messages``, in order."""
    return [m.id for m in messages]


def shape(messages: list[Message]) -> list[str]:
    """A stored transcript as ``"user:<text>"``, ``"steer:<text>"`` or ``"<type>"`` of each
    Native langgraph record (``"ai"``, ``"tool"``)."""
    out: list[str] = []
    for message in messages:
        natives = [p for p in message.parts if isinstance(p, Native)]
        if natives:
            out.append(_record_type(natives[0].data))
        else:
            out.append(("steer:" if message.steered else "user:") + message.text)
    return out


def _record_type(data: str) -> str:
    record: dict[str, Any] = json.loads(data)
    kind: str = record["type"]
    return kind
