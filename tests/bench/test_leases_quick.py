"""``bench/leases.py --quick --json`` on SQLite: both ways to renew at 10 and 100 turns, with
the calls counted by verb. No timing is asserted, only the output's shape and what the
counts must be: per turn, every renewal is a ``renew`` of one lease; together, a
``renew_many`` carries every lease the replica holds."""

from __future__ import annotations

from tests.bench.support import run_bench


def test_the_leases_bench_quick_on_sqlite() -> None:
    stdout, found = run_bench("-m", "bench.leases", "--quick", "--json")
    assert found["turns"] == [10, 100] and found["lease"] == 0.9
    points = {(p["turns"], p["mode"]): p for p in found["points"]}
    assert set(points) == {(n, m) for n in (10, 100) for m in ("per turn", "together")}
    for (turns, mode), point in points.items():
        assert point["store"] == "SQLite"
        calls = point["calls"]
        assert calls.get("stopping", 0) > 0  # SQLite does not notify: the stop poll
        if mode == "per turn":
            assert "renew_many" not in calls and calls["renew"] == point["leases"] > 0
        else:
            assert "renew" not in calls and calls["renew_many"] > 0
            assert point["leases"] == turns * calls["renew_many"]  # each call carried all
        assert set(calls) <= {"stopping", "renew", "renew_many"}, calls
    assert "| SQLite" in stdout and "calls vs per turn" in stdout
