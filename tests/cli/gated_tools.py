"""A tool for the chat's terminal test: it runs until the test creates its gate file.

That makes "a line typed while the tool runs" certain rather than a race with a timer.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from steerable import Tool, tool


@tool
async def inspect_repo(path: str) -> str:
    """Inspect a path of the repository."""
    gate = Path(os.environ["STEERABLE_TEST_GATE"])
    for _ in range(1200):  # a minute at most, so a broken test cannot hang here
        if await asyncio.to_thread(gate.exists):
            return f"{path}: config.toml, 12 lines"
        await asyncio.sleep(0.05)
    return "the gate never opened"


TOOLS: list[Tool] = [inspect_repo]
