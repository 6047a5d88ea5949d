"""``bench/floor.py --quick --json`` on SQLite: steerable's step and the two floors are there,
at both sizes, with their ratios. No timing is asserted, only the output's shape."""

from __future__ import annotations

from tests.bench.support import run_bench


def test_the_floor_bench_quick_on_sqlite() -> None:
    stdout, found = run_bench("-m", "bench.floor", "--quick", "--json", "--stores", "sqlite")
    assert found["rounds"] == 2 and found["steps"] == 5
    assert found["encode_us"] > 0
    (store,) = found["stores"]
    assert store.startswith("SQLite")
    sizes = found["stores"][store]
    assert set(sizes) == {"10", "1000"}
    systems = {"steerable", "steerable take=0", "floor", "floor to_thread"}
    for entry in sizes.values():
        assert set(entry["us_per_step"]) == systems
        assert all(us > 0 for us in entry["us_per_step"].values())
        assert set(entry["ratio"]) == {"floor", "floor to_thread"}
        assert all(r > 0 for r in entry["ratio"].values())
        assert all(len(r) == 2 for r in entry["rounds_us"].values())
    assert "| SQLite" in stdout  # the markdown table
    assert "steerable / to_thread floor" in stdout
