"""``bench/tracing.py --quick``: each mode runs in its own process and is what it says (no
OpenTelemetry loaded; the API with nothing recording; the SDK making every span). No
timing is asserted, only that the figures are there."""

from __future__ import annotations

from tests.bench.support import ROOT, run_bench


def test_the_tracing_bench_quick() -> None:
    stdout, found = run_bench(str(ROOT / "bench" / "tracing.py"), "--quick")
    steps = found["steps"]
    none, api = found["none"], found["api"]
    assert none["opentelemetry_modules"] == 0 and none["ratio"] == 1.0
    assert api["opentelemetry_modules"] > 0 and api["spans_per_run"] == 0
    for mode in ("sdk, dropped", "sdk, batch"):
        # a run: its invoke_agent span, a chat span per model request, a tool span per call
        assert found[mode]["spans_per_run"] == 1 + (steps + 1) + steps, found[mode]
    for mode in ("none", "api", "sdk, dropped", "sdk, batch"):
        assert found[mode]["us_per_step"] > 0
    assert "| sdk, batch" in stdout  # the markdown table
