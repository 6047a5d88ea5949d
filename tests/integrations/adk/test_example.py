"""examples/integrations/adk_steering.py runs, keyless, and shows the steer in place."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_the_example_steers_the_run_in_place(tmp_path: Path) -> None:
    script = ROOT / "examples" / "integrations" / "adk_steering.py"
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "adk.db")],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    lines = [line.split() for line in done.stdout.splitlines()]
    assert ["answer:", "Rome:", "sunny"] in lines
    stored = [line[0] for line in lines[lines.index(["stored:"]) + 1 :]]
    assert stored == [
        "user",
        "user",
        "assistant",
        "user",
        "steer",
        "assistant",
        "user",
        "assistant",
    ]
