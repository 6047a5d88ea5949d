"""Running a benchmark's short form from a test: no timing is asserted, only its output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def run_bench(*args: str) -> tuple[str, Any]:
    """``python ARGS`` from the repository root: what it printed, and its last line's JSON.

    It must exit 0 within a minute."""
    done = subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    return done.stdout, json.loads(done.stdout.strip().splitlines()[-1])
