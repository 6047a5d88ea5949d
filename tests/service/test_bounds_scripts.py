"""The bounds scripts' short runs on SQLite (``scripts/bounds_load.py``, ``stop_latency.py``
and ``soak.py``; docs/benchmarks.md, "The service's bounds"): each against real
``steerable serve`` processes, their figures held to what the bounds promise.

- a status and every page of 100 inputs of 900 KB stay under 5 MB each (the queue's
  bytes were one 90 MB answer before the bounds); the queue's load is answered with 429s,
  never a 5xx, and no session holds more than ``--max-waiting``; no half request head is
  still open after ``--head-timeout`` and a margin, and every stalled body is a 408;
- a stop reaches its turn well within a renewal (5 s) through the stop poll;
- three replicas under a steady load answer no 5xx and complete the turns they are sent.

The three run at once, in one test (about 35 s together; bounds_load is the longest).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
RENEWAL_S = 15.0 / 3  # serve's default lease, renewed every third of it

pytestmark = pytest.mark.slow

RUNS = {
    "bounds_load": ["--short", "--store", "sqlite"],
    "stop_latency": ["--short", "--stores", "sqlite"],
    "soak": ["--short", "--store", "sqlite", "--minutes", "0.25", "--every", "3"],
}


Run = tuple[int, dict[str, Any], str]


def _run_all(directory: Path) -> dict[str, Run]:
    """Each script's exit status, figures (its JSON line) and progress, run at once.

    A script that overruns is interrupted (SIGINT: its serve processes end with it)."""
    running = {}
    for name, flags in RUNS.items():
        with (
            (directory / f"{name}.out").open("w") as out,
            (directory / f"{name}.err").open("w") as err,
        ):
            running[name] = subprocess.Popen(
                [sys.executable, str(SCRIPTS / f"{name}.py"), *flags],
                cwd=ROOT,
                stdout=out,
                stderr=err,
            )
    deadline = time.monotonic() + 200
    done: dict[str, Run] = {}
    for name, process in running.items():
        try:
            process.wait(max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        lines = (directory / f"{name}.out").read_text().strip().splitlines()
        last = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {}
        done[name] = (process.returncode, last, (directory / f"{name}.err").read_text()[-3000:])
    return done


@pytest.mark.timeout(240)
def test_the_bounds_scripts_short_on_sqlite(tmp_path: Path) -> None:
    """One test, so that pytest-xdist runs the three once, on one worker."""
    runs = _run_all(tmp_path)
    _check_bounds_load(*runs["bounds_load"])
    _check_stop_latency(*runs["stop_latency"])
    _check_soak(*runs["soak"])


def _check_bounds_load(code: int, found: dict[str, Any], output: str) -> None:
    assert code == 0 and found, output
    assert found["server_errors"] == 0
    status = found["status"]
    assert status["status_waiting_total"] == status["paged_inputs"] == 100, status
    assert status["largest_answer_bytes"] < 5_000_000, status
    assert status["rss_peak_mb"] < 300, status  # 463 MB before the bounds
    queue = found["queue"]
    assert queue["accepted_202"] > 0, queue
    assert queue["rate_limited_429"] + queue["queue_full_429"] > 0, queue
    assert queue["most_waiting_seen"] <= queue["max_waiting"], queue
    slow = found["slow"]
    assert slow["heads_open_after_timeout_and_2s"] == 0, slow
    assert slow["stalled_408"] == slow["stalled_bodies"] == 200, slow
    assert slow["plain_request_meanwhile"] == 200, slow


def _check_stop_latency(code: int, found: dict[str, Any], output: str) -> None:
    assert code == 0 and found, output
    sqlite = found["stores"]["sqlite"]
    polled, renewal = sqlite["stop_poll"], sqlite["renewal_only"]
    assert polled["stopped"] == polled["samples"] == 3, polled
    assert polled["max_s"] < RENEWAL_S / 2, polled  # the poll: 0.2 s, not the renewal's 5
    assert renewal["stopped"] == renewal["samples"] == 3, renewal
    assert renewal["max_s"] < RENEWAL_S + 1.5, renewal


def _check_soak(code: int, found: dict[str, Any], output: str) -> None:
    assert code == 0 and found, output
    assert found["server_errors"] == 0, found["answers"]
    assert found["turns"].get("completed", 0) > 0 and set(found["turns"]) == {"completed"}
    assert len(found["samples"]) >= 4, found["samples"]
    for sample in found["samples"]:
        assert len(sample["replicas"]) == 3 and all(r["rss_mb"] > 20 for r in sample["replicas"])
    assert all(isinstance(rate, float) for rate in found["rss_slope_mb_per_min"])
