"""``bench/turn_length.py --quick --json`` on SQLite: the claim and the whole turn are there,
for both lengths, with their ratios to the shortest. No timing is asserted, only the output's
shape."""

from __future__ import annotations

from tests.bench.support import run_bench


def test_the_turn_length_bench_quick_on_sqlite() -> None:
    stdout, found = run_bench("-m", "bench.turn_length", "--quick", "--json")
    assert found["rounds"] == 5 and found["warm"] == 1
    assert found["lengths"] == [10, 200]
    verbs = found["verbs"]
    assert verbs == ["enqueue", "claim", "step tool", "end_turn"]
    assert list(found["stores"]) == ["SQLite", "SQLite, held"]
    for name, sizes in found["stores"].items():
        assert set(sizes) == {"10", "200"}
        for length, entry in sizes.items():
            assert entry["turns"] == 5
            assert entry["claim_us"] > 0 and entry["turn_us"] > entry["claim_us"]
            assert set(entry["verbs_us"]) == set(verbs)
            assert all(us > 0 for us in entry["verbs_us"].values())
            assert entry["claim_ratio"] > 0 and entry["turn_ratio"] > 0
            low, high = entry["messages_claimed"]
            if name.endswith("held"):  # a replica that served the last turn reads nothing
                assert low == high == 0
            else:  # 4 messages a turn; a session past length + length // 10 + 8 is filled anew
                assert int(length) <= low <= high <= int(length) + int(length) // 10 + 8
            assert entry["sessions"] >= 1
        assert sizes["10"]["claim_ratio"] == 1.0 and sizes["10"]["turn_ratio"] == 1.0
    assert "| SQLite" in stdout  # the markdown table
    assert "claim vs 10" in stdout
