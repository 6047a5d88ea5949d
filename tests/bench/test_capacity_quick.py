"""``bench/capacity.py --quick --json`` on Postgres: every per-turn figure is there, each round's
and the median, the calls by verb, the renewals and the estimate. No timing is asserted, only the
output's shape (and counts that follow from the workload: a turn is one send, one claim, three
steps and one end, each a commit)."""

from __future__ import annotations

import os

import pytest

from tests.bench.support import run_bench

FIGURES = {
    "turns_per_s",
    "replica_cpu_ms",
    "front_cpu_ms",
    "db_cpu_ms",
    "db_cpu_replica_ms",
    "db_cpu_front_ms",
    "db_cpu_shared_ms",
    "wal_bytes",
    "calls",
    "commits",
}


def test_the_capacity_bench_quick_on_postgres() -> None:
    stdout, found = run_bench("-m", "bench.capacity", "--quick", "--json")
    if "skipped" in found:
        if os.environ.get("STEERABLE_REQUIRE_SERVERS") == "1":
            pytest.fail(found["skipped"])
        pytest.skip(found["skipped"])
    assert found["args"]["rounds"] == 2 and found["args"]["sessions"] == 8
    # the warm-up round: 2 sessions x 3 sends; then 2 rounds of 8 x 3
    assert found["states"] == {"completed": 2 * 3 + 2 * 8 * 3}
    turns = found["turns"]
    assert turns["turns"] == 2 * 8 * 3
    assert turns["idle_sends"] + turns["busy_sends"] == turns["turns"]
    assert len(turns["rounds"]) == 2
    for figures in (*turns["rounds"], turns["median"]):
        assert set(figures) == FIGURES
        assert figures["turns_per_s"] > 0 and figures["replica_cpu_ms"] > 0
        assert figures["front_cpu_ms"] > 0 and figures["wal_bytes"] > 0
        assert figures["db_cpu_ms"] >= figures["db_cpu_replica_ms"] >= 0
        # enqueue, claim with the prompt's step, the tool's step, end_turn with the answer
        assert figures["commits"] == 4.0
    verbs = turns["calls_by_verb"]
    assert verbs["enqueue"] == verbs["claim"] == verbs["end_turn"] == 1.0
    assert verbs["step"] == 1.0
    renewals = found["renewals"]
    assert "renew, 16 calls at once" in renewals
    for mode in renewals.values():
        assert mode["leases_per_s"] > 0 and mode["client_cpu_us_per_lease"] > 0
        assert mode["wal_bytes_per_lease"] > 0
        assert mode["db_cpu_us_per_call"] == pytest.approx(
            mode["db_cpu_us_per_lease"] * mode["batch"]
        )
    assert set(found["estimate"]) == {"8", "32"}
    for entry in found["estimate"].values():
        assert entry["turns_per_s"] > 0 and entry["commits_per_s"] == pytest.approx(
            4 * entry["turns_per_s"]
        )
        assert entry["running_turns_renew"] > 0
    assert "| median" in stdout  # the markdown tables
    assert "| 8 vCPUs" in stdout
