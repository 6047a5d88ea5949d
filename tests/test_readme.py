"""README.md stays true: its quick start runs, and `steerable demo` and `--help` work."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_quick_start_runs_as_written(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    code = re.findall(r"```python\n(.*?)```", readme, re.S)[0]
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "['use Celsius']" in done.stdout


def test_steerable_demo_hands_the_steer_over_exactly_once() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "steerable.cli", "demo"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SIGKILL: True" in done.stdout
    assert "0 left in the store; the steer is in the transcript 1 time(s)" in done.stdout
    assert "FAILED" not in done.stdout


def test_steerable_help_lists_the_commands() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "steerable.cli", "--help"], capture_output=True, text=True
    )
    assert done.returncode == 0
    assert "demo" in done.stdout


def test_the_service_example_runs_as_written(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    code = next(c for c in re.findall(r"```python\n(.*?)```", readme, re.S) if "Service(" in c)
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "steer went to turn True",
        "completed answered: plan my week | skip friday",
    ]
