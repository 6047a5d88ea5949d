"""examples/integrations/pydantic_ai_steering.py runs, keyless, and shows the steer in place."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

EXAMPLE = (
    Path(__file__).resolve().parents[3] / "examples" / "integrations" / "pydantic_ai_steering.py"
)


async def test_the_example_shows_a_steer_landing_mid_run() -> None:
    child = await asyncio.create_subprocess_exec(
        sys.executable, str(EXAMPLE), stdout=asyncio.subprocess.PIPE
    )
    out, _ = await child.communicate()
    assert child.returncode == 0
    lines = out.decode().splitlines()
    assert lines[1] == "model request 2: ['Weather for my trip?', 'Actually, Rome, not Paris.']"
    assert lines[2] == "answer: Noted: Actually, Rome, not Paris."
    assert [line.split()[0] for line in lines[4:]] == [
        "user",
        "assistant",
        "user",
        "steer",
        "assistant",
    ]
    assert lines[4 + 3].split(None, 1)[1] == "Actually, Rome, not Paris."
