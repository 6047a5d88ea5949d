"""A picture of a steered service turn's trace: docs/observability/trace.png.

    python scripts/trace_picture.py [--out docs/observability/trace.png] [--no-picture]
        [--json]

It runs one steered turn in this process, with the OpenTelemetry SDK set and its spans
kept by an ``InMemorySpanExporter``: a :class:`~steerable.service.Service` over a SQLite
file in a temporary directory serves a ``ScriptedModel`` agent whose first step calls the
tool ``look`` twice; the client sends the message inside a span of its own (``client
request``); while the tools run, a second ``Service`` on the same database (as another
process would) steers the session, which makes a ``steerable steer`` span of its own, in
a trace of its own; the turn takes the steer at its second step, whose ``chat`` span links
to the steer's span.

It prints the span tree as text (name, parent, key attributes, links and events; with
``--json``, one JSON line of rows), then renders the spans as an HTML timeline (one row per
span, indented by depth, a bar from its start to its end on a shared time axis, the link
drawn as an arrow) and screenshots it with Playwright driving Debian's Chromium
(``/usr/bin/chromium``; never ``playwright install``). ``--no-picture`` skips the page.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import html
import json
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from steerable.models.base import ModelRequest
from steerable.models.scripted import ScriptedModel, call
from steerable.service import ReActAgent, Service
from steerable.spec import Spec
from steerable.stores.sqlite import SQLiteStore
from steerable.tools import tool

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
OUT = ROOT / "docs" / "observability" / "trace.png"
SHOWN = (
    "gen_ai.operation.name",
    "gen_ai.request.model",
    "gen_ai.tool.name",
    "steerable.step",
    "steerable.steers",
    "steerable.input.kind",
    "steerable.replica",
    "steerable.turn.state",
    "steerable.turn.steps",
    "steerable.turn.steers",
)
"""The attributes a row shows (the text tree shows them all)."""


# -- the turn ------------------------------------------------------------------------------


@contextlib.contextmanager
def sdk() -> Iterator[InMemorySpanExporter]:
    """The SDK set as the global provider for the block (and the one before put back)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    before = trace._TRACER_PROVIDER  # the API sets its global once; put it back after
    trace._TRACER_PROVIDER = provider
    try:
        yield exporter
    finally:
        trace._TRACER_PROVIDER = before
        provider.shutdown()


async def steered_turn(directory: Path) -> list[ReadableSpan]:
    """Run the steered turn (SDK set for it) and return the spans it ended."""
    with sdk() as exporter:
        await _turn(directory / "trace.db")
        return list(exporter.get_finished_spans())


async def _turn(path: Path) -> None:
    gate = asyncio.Event()
    running = asyncio.Event()

    @tool
    async def look(q: str) -> str:
        """Look something up."""
        running.set()
        await gate.wait()
        await asyncio.sleep(0.03 if q == "a" else 0.06)  # two bars of different lengths
        return f"found {q}"

    def answer(request: ModelRequest) -> str:
        return "done: " + request.messages[-1].text

    model = ScriptedModel(
        [[call("look", '{"q": "a"}'), call("look", '{"q": "b"}')], answer], name="acme:m-1"
    )
    agent = ReActAgent(Spec(tools=[look], max_steps=5), model)
    async with SQLiteStore(path) as store, SQLiteStore(path) as other:
        service = Service(store, agent, poll=0.05, replica="r1")
        client = trace.get_tracer("the-client")
        async with service.serving():
            with client.start_as_current_span("client request", kind=trace.SpanKind.CLIENT):
                accepted = await service.send("s", "look up a and b")
            await asyncio.wait_for(running.wait(), 10)
            await asyncio.sleep(0.05)
            await Service(other).steer("s", "and c")  # another Service, as another process
            await asyncio.sleep(0.05)
            gate.set()
            done = await service.wait("s", accepted.id, seconds=10)
    assert done is not None and done.state == "completed", done
    assert done.text == "done: and c", done.text  # the steer was taken at step 2


# -- the tree ------------------------------------------------------------------------------


@dataclass
class Row:
    """One span in the tree's order (depth first, children by start time)."""

    span: ReadableSpan
    depth: int
    parent: str | None
    links: list[str] = field(default_factory=list)  # the names of the spans linked to

    @property
    def name(self) -> str:
        return self.span.name

    @property
    def attributes(self) -> dict[str, Any]:
        return dict(self.span.attributes or {})

    def json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "depth": self.depth,
            "parent": self.parent,
            "kind": self.span.kind.name,
            "attributes": self.attributes,
            "links": self.links,
            "events": [e.name for e in self.span.events],
        }


def tree(spans: Sequence[ReadableSpan]) -> list[Row]:
    """The spans as rows: each trace's root, then its children, in the order they started."""
    by_id = {s.context.span_id: s for s in spans}
    children: dict[int | None, list[ReadableSpan]] = {}
    for span in spans:
        parent = span.parent.span_id if span.parent is not None else None
        children.setdefault(parent if parent in by_id else None, []).append(span)
    for found in children.values():
        found.sort(key=lambda s: s.start_time or 0)
    rows: list[Row] = []

    def visit(span: ReadableSpan, depth: int, parent: str | None) -> None:
        linked = [by_id[x.context.span_id].name for x in span.links if x.context.span_id in by_id]
        rows.append(Row(span, depth, parent, linked))
        for child in children.get(span.context.span_id, []):
            visit(child, depth + 1, span.name)

    for root in children.get(None, []):
        visit(root, 0, None)
    return rows


def text(rows: Sequence[Row]) -> str:
    """The tree as indented text: each span, its parent, attributes, links and events."""
    lines = []
    for row in rows:
        pad = "    " * row.depth
        lines.append(f"{pad}{row.name}  [{row.span.kind.name.lower()}; parent: {row.parent}]")
        pad += "  · "  # under its span's name, short of its children's
        for key, value in sorted(row.attributes.items()):
            lines.append(f"{pad}{key} = {value!r}")
        for link, target in zip(row.span.links, row.links, strict=False):
            values = ", ".join(f"{k}={v!r}" for k, v in (link.attributes or {}).items())
            lines.append(f"{pad}link -> {target} ({values})")
        for event in row.span.events:
            values = ", ".join(f"{k}={v!r}" for k, v in (event.attributes or {}).items())
            lines.append(f"{pad}event {event.name} ({values})")
    return "\n".join(lines)


# -- the page ------------------------------------------------------------------------------

_ROW, _LABEL, _WIDTH, _TOP = 46, 560, 820, 56


def page(rows: Sequence[Row]) -> str:
    """An HTML page: the rows as an SVG timeline, the links as arrows."""
    start = min(r.span.start_time or 0 for r in rows)
    end = max(r.span.end_time or 0 for r in rows)
    scale = (_WIDTH - 20) / max(end - start, 1)

    def x(ns: int | None) -> float:
        return _LABEL + 10 + ((ns or start) - start) * scale

    parts: list[str] = []
    total_ms = (end - start) / 1e6
    step = 50 if total_ms < 600 else 100
    for ms in range(0, int(total_ms) + 1, step):
        at = x(start + ms * 1_000_000)
        parts.append(
            f'<line x1="{at:.1f}" y1="{_TOP - 6}" x2="{at:.1f}" y2="{_TOP + len(rows) * _ROW}"'
            ' class="tick"/>'
            f'<text x="{at:.1f}" y="{_TOP - 12}" class="axis">{ms} ms</text>'
        )
    where: dict[int, tuple[float, float, float]] = {}  # span id -> (x0, x1, y of its bar)
    traces = 0
    for index, row in enumerate(rows):
        top = _TOP + index * _ROW
        x0, x1 = x(row.span.start_time), x(row.span.end_time)
        x1 = max(x1, x0 + 3)  # a request of a scripted model takes no time: still a mark
        where[row.span.context.span_id] = (x0, x1, top + 16)
        shade = ' class="band"' if index % 2 else ""
        parts.append(f'<rect x="0" y="{top}" width="100%" height="{_ROW}"{shade} fill="none"/>')
        indent = 12 + row.depth * 22
        if row.depth == 0:
            traces += 1
            if traces > 1:
                parts.append(f'<line x1="0" y1="{top}" x2="100%" y2="{top}" class="split"/>')
        parts.append(
            f'<text x="{indent}" y="{top + 19}" class="name">{html.escape(row.name)}</text>'
            f'<text x="{indent}" y="{top + 37}" class="attrs">'
            f"{html.escape(_shown(row, traces if row.depth == 0 else 0))}</text>"
            f'<rect x="{x0:.1f}" y="{top + 8}" width="{x1 - x0:.1f}" height="16" rx="3"'
            f' class="bar {_colour(row)}"/>'
            f'<text x="{x1 + 6:.1f}" y="{top + 21}" class="ms">'
            f"{_duration(row):.1f} ms</text>"
        )
        for event in row.span.events:
            at = x(event.timestamp)
            at_step = (event.attributes or {}).get("steerable.step")
            parts.append(
                f'<path d="M{at:.1f},{top + 7} l6,-8 l-12,0 z" class="event"/>'
                f'<text x="{at - 8:.1f}" y="{top + 40}" class="note" text-anchor="end">'
                f"▼ event {html.escape(event.name)} (step {at_step})</text>"
            )
    parts += _links(rows, where, x)
    height = _TOP + len(rows) * _ROW + 50
    legend = (
        f'<text x="12" y="{height - 18}" class="note">bars: a span\'s start to its end on one'
        " time axis; ▼ an event; dashed arrows: span links to the steer's own span, in a trace"
        " of its own (red: from the chat span of the step that took it; orange: from the"
        " turn's span, at its steers_taken event)</text>"
    )
    return _HTML.format(
        width=_LABEL + _WIDTH + 90,
        height=height,
        body="".join(parts) + legend,
        title="A steered service turn: its spans (steerable, OpenTelemetry SDK)",
    )


def _shown(row: Row, trace_number: int) -> str:
    values = row.attributes
    shown = [f"{k.split('.', 1)[1]}={values[k]}" for k in SHOWN if k in values]
    if trace_number:
        shown.insert(0, f"trace {trace_number}" + (":" if shown else ""))
    return "  ".join(shown)


def _links(rows: Sequence[Row], where: dict[int, tuple[float, float, float]], x: Any) -> list[str]:
    """Each link as an arrow to the span it names, from its span's bar (from the turn's
    ``steerable.steers_taken`` event, where the turn's span has one), and one label."""
    parts: list[str] = []
    sources: list[str] = []
    target: tuple[float, float, float] | None = None
    for row in rows:
        for link in row.span.links:
            found = where.get(link.context.span_id)
            if found is None:
                continue
            target = found
            sx, _, sy = where[row.span.context.span_id]
            taken = [e for e in row.span.events if e.name == "steerable.steers_taken"]
            if taken:
                sx = x(taken[0].timestamp)
            turn = row.attributes.get("gen_ai.operation.name") == "invoke_agent"
            tx, ty = found[0] + (found[1] - found[0]) / 2, found[2]
            parts.append(
                f'<path d="M{sx:.1f},{sy + 9} C{sx:.1f},{ty - 20} {tx + 80:.1f},{ty - 30}'
                f' {tx + (9 if turn else 1):.1f},{ty - 9}" class="link{" turn" if turn else ""}"'
                f' marker-end="url(#{"arrow2" if turn else "arrow"})"/>'
            )
            step = row.attributes.get("steerable.step")
            short = row.name.split(" ")[0] if turn else row.name
            sources.append(f"{short} (step {step})" if step else f"{short} (at its event)")
    if target is not None:
        parts.append(
            f'<text x="{target[1] + 60:.1f}" y="{target[2] + 5:.1f}" class="linklabel">'
            f"◀ links from {html.escape(', '.join(sources))}</text>"
        )
    return parts


def _duration(row: Row) -> float:
    return ((row.span.end_time or 0) - (row.span.start_time or 0)) / 1e6


def _colour(row: Row) -> str:
    operation = row.attributes.get("gen_ai.operation.name")
    if isinstance(operation, str):
        return operation
    return "input" if row.name.startswith("steerable ") else "client"


_HTML = """<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title><style>
body {{ margin: 0; background: #fff; font-family: "DejaVu Sans", sans-serif; }}
h1 {{ font-size: 18px; margin: 14px 12px 0; color: #222; }}
.name {{ font-size: 15px; font-weight: bold; fill: #111; }}
.attrs {{ font-size: 12px; fill: #555; font-family: "DejaVu Sans Mono", monospace; }}
.axis {{ font-size: 12px; fill: #666; text-anchor: middle; }}
.tick {{ stroke: #e4e4e4; }}
.band {{ fill: #f6f7f9; }}
.ms {{ font-size: 12px; fill: #333; }}
.note {{ font-size: 12px; fill: #8a3b00; }}
.bar.client {{ fill: #7a7a7a; }}
.bar.input {{ fill: #2e7d32; }}
.bar.invoke_agent {{ fill: #1f5fa8; }}
.bar.chat {{ fill: #c2410c; }}
.bar.execute_tool {{ fill: #7c3aed; }}
.event {{ fill: #d97706; }}
.link {{ fill: none; stroke: #d32f2f; stroke-width: 2; stroke-dasharray: 6 4; }}
.link.turn {{ stroke: #d97706; stroke-width: 1.5; }}
.linklabel {{ font-size: 13px; fill: #d32f2f; font-weight: bold; }}
.split {{ stroke: #999; stroke-dasharray: 2 3; }}
</style></head><body><h1>{title}</h1>
<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}">
<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="8"
 markerHeight="8" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#d32f2f"/>
</marker><marker id="arrow2" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="8"
 markerHeight="8" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#d97706"/>
</marker></defs>{body}</svg></body></html>
"""


async def screenshot(content: str, out: Path) -> None:
    """The page as a PNG, through Playwright and the system's Chromium."""
    from playwright.async_api import async_playwright

    out.parent.mkdir(parents=True, exist_ok=True)
    async with async_playwright() as driver:
        browser = await driver.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu", "--no-first-run"]
        )
        try:
            view = await browser.new_page(viewport={"width": 1480, "height": 200})
            await view.set_content(content)
            await view.screenshot(path=str(out), full_page=True)
        finally:
            await browser.close()


# -- the script ----------------------------------------------------------------------------


async def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=OUT, help="the PNG (and its .html beside)")
    parser.add_argument("--no-picture", action="store_true", help="the text tree only")
    parser.add_argument("--json", action="store_true", help="the rows as one JSON line")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="trace-picture-") as directory:
        rows = tree(await steered_turn(Path(directory)))
    print(text(rows))
    if args.json:
        print(json.dumps([r.json() for r in rows], default=str))
    if not args.no_picture:
        await screenshot(page(rows), args.out)
        print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main())
