"""A process's first ADK turn holds no lease while ADK imports its run machinery.

ADK imports most of what a run needs inside the first ``Runner.run_async`` (some 550
modules in google-adk 2.13), on the event loop: 0.4 s to 1.2 s measured, enough for a
replica with a 1 s lease to be fenced on its first turn. Building an ``ADKAgent`` does
that first run up front (``steerable.integrations.adk._warm``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]


def _first_turn(path: Path, *flags: str) -> dict[str, Any]:
    """Run ``first_turn`` in a fresh process (nothing of ADK's run imported yet)."""
    command = [sys.executable, "-m", "tests.integrations.adk.first_turn", str(path), *flags]
    done = subprocess.run(command, capture_output=True, text=True, check=True, timeout=60, cwd=ROOT)
    answer: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return answer


def test_the_first_turn_imports_nothing_of_adk_and_keeps_its_lease(tmp_path: Path) -> None:
    warm = _first_turn(tmp_path / "warm.db")
    # without the warm-up the same turn imports ADK's run machinery, under the lease
    cold = _first_turn(tmp_path / "cold.db", "--cold")
    assert "google.adk.agents._agent_router" in cold["imported"]
    assert warm["imported"] == []
    assert warm["state"] == "completed"
    counters = warm["counters"]
    assert (counters["claims"], counters["resumed"], counters["fenced"]) == (1, 0, 0)
