"""What tracing costs per step: steerable's ReAct loop without OpenTelemetry and with it.

One run is the loop overhead's conversation (``bench.loop_overhead``): a prompt, ``--steps``
replies that each call a trivial async tool, then the answer, with ``ScriptedModel`` and a
new session of a ``MemoryStore``; µs per step is the run's wall time over its model
requests (``steps + 1``). Four modes, each in a fresh process of its own so that no module
state carries over from one to the next:

- ``none``: nothing of OpenTelemetry imported (what ``import steerable`` alone gives; the
  process asserts after its runs that no ``opentelemetry`` module was loaded);
- ``api``: ``opentelemetry.trace`` imported, no provider set (the API's default: steerable
  looks, finds nothing that records, and makes no span);
- ``sdk, dropped``: the SDK's ``TracerProvider`` with one span processor that only counts
  the spans that end: the cost of making spans, none of exporting them;
- ``sdk, batch``: the SDK with a ``BatchSpanProcessor`` and an ``InMemorySpanExporter``
  (its thread shares the process, as an exporter's would; the exported spans are cleared
  between runs, outside the timed part).

A round starts one process per mode, in a rotating order; a process makes one warm-up run,
then ``--runs`` timed runs, and reports their median. Figures are the median of ``--rounds``
rounds; a mode's ratio to ``none`` is the median of its rounds' ratios (the processes of a
round run one after the other, so they share the machine's load). It prints markdown tables,
then one JSON line of the figures. ``--quick`` is a short run (a few seconds) for the test.

Run: ``python bench/tracing.py`` (or ``python -m bench.tracing``).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if not __package__:  # run as a file: the checkout is the top level, not bench/ (whose
    sys.path[0] = str(ROOT)  # http.py would shadow the standard library's http)

MODES = ("none", "api", "sdk, dropped", "sdk, batch")


async def echo(x: int) -> str:
    """Answer ok."""
    return "ok"


# -- one mode, in a process of its own ---------------------------------------------------


class _Spans:
    """How the mode's process sees the spans its runs make: set up, counted, cleared."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.ended = 0
        self._flush: Any = None
        self._exporter: Any = None
        if mode == "api":
            import opentelemetry.trace  # noqa: F401  (the API's default provider)
        elif mode in ("sdk, dropped", "sdk, batch"):
            self._set_provider(mode)

    def _set_provider(self, mode: str) -> None:
        from opentelemetry import trace
        from opentelemetry.context import Context
        from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        spans = self

        class Dropped(SpanProcessor):
            """Keeps nothing: counts the spans that end."""

            def on_start(self, span: Span, parent_context: Context | None = None) -> None:
                pass

            def on_end(self, span: ReadableSpan) -> None:
                spans.ended += 1

        provider = TracerProvider()
        if mode == "sdk, dropped":
            provider.add_span_processor(Dropped())
        else:
            self._exporter = InMemorySpanExporter()
            provider.add_span_processor(BatchSpanProcessor(self._exporter))
        self._flush = provider.force_flush
        trace.set_tracer_provider(provider)

    def clear(self) -> None:
        """Count the spans exported so far and let them go (outside the timed part)."""
        if self._exporter is not None:
            self.ended += len(self._exporter.get_finished_spans())
            self._exporter.clear()

    def finish(self) -> dict[str, Any]:
        """What the process checks and reports once its runs are done."""
        from steerable import telemetry

        if self._flush is not None:
            self._flush()
        self.clear()
        loaded = sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")
        if self.mode == "none":
            assert not loaded, loaded  # `import steerable` alone loads none of it
        if self.mode in ("none", "api"):
            assert telemetry.tracer() is None
        else:
            assert telemetry.tracer() is not None
        return {"spans": self.ended, "opentelemetry_modules": len(loaded)}


async def _mode(mode: str, steps: int, runs: int) -> dict[str, Any]:
    """One mode's runs in this process: µs per step of each, and what it checked."""
    spans = _Spans(mode)  # before steerable is imported, as an application would set it
    from steerable import Runner, ScriptedModel, Spec, open_session
    from steerable.models.scripted import call
    from steerable.stores.memory import MemoryStore

    store = MemoryStore()
    spec = Spec(tools=[echo], max_steps=steps + 1)
    script = [call("echo", '{"x": 1}') for _ in range(steps)]
    per_step: list[float] = []
    for index in range(runs + 1):  # the first is the warm-up
        session = open_session(uuid.uuid4().hex, store)
        model = ScriptedModel([*script, "done"])
        started = time.perf_counter()
        result = await Runner.run(dataclasses.replace(spec, session=session), "go", model)
        seconds = time.perf_counter() - started
        assert result.reason == "completed", result.error
        if index:
            per_step.append(seconds / (steps + 1))
        spans.clear()
    found = spans.finish()
    return {"mode": mode, "us_per_step": statistics.median(per_step) * 1e6, "runs": runs, **found}


# -- the rounds, from the parent ------------------------------------------------------


def _one(mode: str, steps: int, runs: int) -> dict[str, Any]:
    flags = ["--mode", mode, "--steps", str(steps), "--runs", str(runs)]
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"mode {mode!r} failed:\n{done.stderr}")
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def measure(steps: int, runs: int, rounds: int) -> dict[str, list[dict[str, Any]]]:
    """Every mode once per round, in a rotating order; each in a new process."""
    found: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    for index in range(rounds):
        shift = index % len(MODES)
        for mode in MODES[shift:] + MODES[:shift]:
            found[mode].append(_one(mode, steps, runs))
    return found


def figures(found: dict[str, list[dict[str, Any]]], steps: int) -> dict[str, Any]:
    """The medians over rounds, the ratios to ``none`` (the median of each round's), and
    the spans a run made."""
    per_step = {m: statistics.median(r["us_per_step"] for r in found[m]) for m in MODES}
    base = per_step["none"]
    bases = [r["us_per_step"] for r in found["none"]]
    return {
        mode: {
            "us_per_step": round(per_step[mode], 2),
            # each round's ratio is of processes run side by side: their median, not the
            # ratio of the medians, so a round on a busier machine weighs on both sides alike
            "ratio": round(
                statistics.median(
                    r["us_per_step"] / b for r, b in zip(found[mode], bases, strict=True)
                ),
                3,
            ),
            "added_us_per_step": round(per_step[mode] - base, 2),
            "rounds_us_per_step": [round(r["us_per_step"], 2) for r in found[mode]],
            "spans_per_run": found[mode][0]["spans"] / (found[mode][0]["runs"] + 1),
            "opentelemetry_modules": found[mode][0]["opentelemetry_modules"],
        }
        for mode in MODES
    } | {"steps": steps}


def report(result: dict[str, Any]) -> str:
    from bench._common import table

    rows = []
    for mode in MODES:
        one = result[mode]
        rows.append(
            [
                mode,
                f"{one['us_per_step']:.1f}",
                "-" if mode == "none" else f"{one['added_us_per_step']:+.1f}",
                f"{one['ratio']:.2f}x",
                f"{one['spans_per_run']:g}",
                str(one["opentelemetry_modules"]),
                " ".join(f"{x:.0f}" for x in one["rounds_us_per_step"]),
            ]
        )
    headers = ["mode", "µs/step", "+µs vs none", "vs none", "spans/run", "otel modules", "rounds"]
    return table(headers, rows)


def arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    add = parser.add_argument
    add("--steps", type=int, default=20, help="tool steps per run")
    add("--runs", type=int, default=200, help="timed runs per process")
    add("--rounds", type=int, default=5, help="processes per mode (the figure is their median)")
    add("--quick", action="store_true", help="a few seconds: 5 steps, 20 runs, 1 round")
    add("--mode", choices=MODES, help=argparse.SUPPRESS)  # one mode's process
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.runs, args.rounds = 5, 20, 1
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = arguments(argv)
    if args.mode is not None:
        print(json.dumps(asyncio.run(_mode(args.mode, args.steps, args.runs))))
        return
    from bench._common import machine

    started = time.perf_counter()
    load = os.getloadavg()
    result = figures(measure(args.steps, args.runs, args.rounds), args.steps)
    after = os.getloadavg()
    result["load"] = [round(load[0], 2), round(after[0], 2)]
    print("# What tracing costs per step\n")
    extra = [
        f"- {args.rounds} rounds (a process per mode each) of {args.runs} runs of"
        f" {args.steps} tool steps + answer, a MemoryStore session",
        f"- load average (1 min) {load[0]:.2f} before, {after[0]:.2f} after",
    ]
    print(machine(extra))
    print()
    print(report(result))
    print(f"\n({time.perf_counter() - started:.0f} s)")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
