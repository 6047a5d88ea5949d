"""Another process that steers a session: ``python -m tests.telemetry.steer_process URL SID TEXT``.

It sets up its own tracer provider (the SDK, spans kept in memory), steers through a
:class:`Service` of its own on the store at URL, and prints one JSON line: the trace and
span ids of its ``steerable steer`` span and the steer's answer.
"""

from __future__ import annotations

import asyncio
import json
import sys

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from steerable.service import Service
from steerable.stores.url import open_url


async def main(url: str, session: str, text: str) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    async with open_url(url) as store:
        accepted = await Service(store).steer(session, text)
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "steerable steer"]
    line = {
        "trace": f"{span.context.trace_id:032x}",
        "span": f"{span.context.span_id:016x}",
        "id": accepted.id,
        "turn": accepted.turn,
    }
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
