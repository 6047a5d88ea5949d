"""A process's first ADK turn holds no lease while ADK imports its run machinery.

ADK imports most of what a run needs inside the first ``Runner.run_async`` (some 550
modules in google-adk 2.13), on the event loop: 0.4 s to 1.2 s measured, enough for a
replica with a 1 s lease to be fenced on its first turn. Building an ``ADKAgent`` does
that first run up front (``steerable.integrations.adk._warm``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from steerable.integrations.adk import _warm

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


@pytest.mark.timeout(30)
def test_a_warm_up_that_hangs_is_given_up_after_its_timeout(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    stuck = threading.Event()

    async def hang() -> None:  # ADK's first run, stuck
        await asyncio.to_thread(stuck.wait)

    monkeypatch.setattr(_warm, "_one_run", hang)
    monkeypatch.setattr(_warm, "_warm", False)
    monkeypatch.setattr(_warm, "TIMEOUT", 0.2)
    try:
        with caplog.at_level(logging.WARNING, logger="steerable.integrations.adk"):
            _warm.warm_up()
        given_up = _warm._warm
    finally:
        stuck.set()
        for thread in threading.enumerate():
            if thread.name == "steerable-adk-warm-up":
                thread.join(10)
    assert "did not end within" in caplog.text
    assert given_up  # not tried again by the next ADKAgent
