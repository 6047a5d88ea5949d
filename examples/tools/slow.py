"""Tools that take a few seconds each, so you can watch a steer join a turn.

    steerable chat --model openai:gpt-5-mini --tools examples.tools.slow:TOOLS

Ask for something that needs a search, a read and a build; while a tool runs, type a line:
it is shown as ``[steer taken]`` at the next step, after the tool's result, and the model
reads it there. Nothing here touches your disk: the results are made up. Each tool takes
``STEERABLE_TOOL_SECONDS`` seconds (3 by default; the build twice that).
"""

from __future__ import annotations

import asyncio
import os
from typing import Annotated

from pydantic import Field

from steerable import Tool, tool


def _seconds(factor: float = 1.0) -> float:
    return float(os.environ.get("STEERABLE_TOOL_SECONDS", "3")) * factor


@tool
async def search_files(query: Annotated[str, Field(description="words to look for")]) -> str:
    """Search the project's files for ``query``; returns matching paths and lines."""
    await asyncio.sleep(_seconds())
    return (
        f"3 matches for {query!r}:\n"
        f"  src/app/config.py:12: {query} = load_settings()\n"
        f"  src/app/main.py:40: if {query}:\n"
        f"  tests/test_config.py:7: def test_{query.replace(' ', '_')}():"
    )


@tool
async def read_file(path: Annotated[str, Field(description="a path from search_files")]) -> str:
    """Read a file of the project."""
    await asyncio.sleep(_seconds())
    return f"# {path}\nimport os\n\nSETTINGS = os.environ.get('APP_SETTINGS', 'settings.toml')\n"


@tool
async def run_build(target: Annotated[str, Field(description="what to build")] = "all") -> str:
    """Build the project (or one target) and report the outcome."""
    await asyncio.sleep(_seconds(2))
    return f"build {target}: ok, 14 modules compiled, 0 warnings"


TOOLS: list[Tool] = [search_files, read_file, run_build]
