"""What the journal's SIGKILL tests share: a worker process run to its death or its end, and
the ledger its tool writes (the outside world's record of each effect, a line per effect)."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


async def run_worker(args: Sequence[str], *, killed: bool, seconds: float = 120) -> Any:
    """Run ``python ARGS`` from the repository's root. ``killed``: it must end by SIGKILL
    (None is returned); otherwise it must exit 0, and the JSON of its last line is returned."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *args,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), seconds)
    if killed:
        assert process.returncode == -signal.SIGKILL, err.decode()[-3000:]
        return None
    assert process.returncode == 0, err.decode()[-3000:]
    return json.loads(out.decode().splitlines()[-1])


def ledger_lines(path: Path) -> list[list[str]]:
    """The ledger's lines split into words; none if the tool never ran."""
    text = path.read_text() if path.exists() else ""
    return [line.split() for line in text.splitlines()]
