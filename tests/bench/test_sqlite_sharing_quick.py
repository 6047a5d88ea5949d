"""``bench/sqlite_sharing.py --quick --json``: every layout ran, and each steer was taken once
by the takers of 4 processes, of 48 store objects, of one store. No timing is asserted."""

from __future__ import annotations

from tests.bench.support import run_bench


def test_the_sharing_bench_quick() -> None:
    stdout, found = run_bench("-m", "bench.sqlite_sharing", "--quick", "--json")
    assert found["wrong"] == 0
    assert set(found["steers_per_second"]) == {
        "1 store, 1 process",
        "48 stores, 1 process",
        "4 processes, 1 store each",
    }
    assert all(rate > 0 for rate in found["steers_per_second"].values())
    assert "| 4 processes, 1 store each" in stdout  # the markdown table
