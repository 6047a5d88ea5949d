"""examples/integrations/langgraph_steering.py runs, keyless, and shows the steer in place."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.integrations.langgraph.support import ROOT

pytestmark = pytest.mark.slow


def test_the_example_steers_the_run_to_rome_with_the_steer_once_after_the_tool_result(
    tmp_path: Path,
) -> None:
    script = ROOT / "examples" / "integrations" / "langgraph_steering.py"
    run = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "trip.db")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == "answer: It is sunny, 24°C (Rome) in Rome."
    kinds = [line.split()[1:3] for line in lines[2:]]
    assert [k[0] for k in kinds] == ["user", "langgraph", "langgraph", "steer"] + ["langgraph"] * 3
    assert sum("Rome instead" in line for line in lines) == 1
    assert "rainy" in lines[4] and "Rome instead" in lines[5]
