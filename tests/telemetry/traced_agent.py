"""An agent for ``steerable serve`` tests of tracing across replicas.

Importing it sets the process's tracer provider (the SDK) with an exporter that appends
each span, as it ends, as one JSON line to ``$STEERABLE_TEST_SPANS``. Its turn calls
``work`` once, then answers; in a replica started with ``STEERABLE_TEST_DIE_IN_TOOL=1``
``work`` SIGKILLs its own process: the replica dies inside the turn.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from steerable.messages import ToolCall
from steerable.models.base import ModelRequest
from steerable.models.scripted import ScriptedModel, call
from steerable.service.agent import ReActAgent
from steerable.service.demo import turn_of_request
from steerable.spec import Spec
from steerable.tools import tool


class LinesExporter(SpanExporter):
    """Each span as a JSON line: name, ids, parent, attributes, events, links."""

    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(self.path, "a") as out:
            for span in spans:
                out.write(json.dumps(_line(span), default=str) + "\n")
            out.flush()
            os.fsync(out.fileno())
        return SpanExportResult.SUCCESS


def _line(span: ReadableSpan) -> dict[str, object]:
    return {
        "name": span.name,
        "trace": f"{span.context.trace_id:032x}",
        "span": f"{span.context.span_id:016x}",
        "parent": f"{span.parent.span_id:016x}" if span.parent else None,
        "start": span.start_time,
        "end": span.end_time,
        "attributes": dict(span.attributes or {}),
        "events": [{"name": e.name, "attributes": dict(e.attributes or {})} for e in span.events],
        "links": [
            {"span": f"{x.context.span_id:016x}", "attributes": dict(x.attributes or {})}
            for x in span.links
        ],
        "status": span.status.status_code.name,
        "pid": os.getpid(),
    }


_provider = TracerProvider()
_provider.add_span_processor(SimpleSpanProcessor(LinesExporter(os.environ["STEERABLE_TEST_SPANS"])))
trace.set_tracer_provider(_provider)


@tool
def work(step: int) -> str:
    """Do the work (and, in a replica told to, die doing it)."""
    if os.environ.get("STEERABLE_TEST_DIE_IN_TOOL") == "1":
        os.kill(os.getpid(), signal.SIGKILL)
    return f"step {step} done"


def _reply(request: ModelRequest) -> str | ToolCall:
    done = [r for m in turn_of_request(request.messages) for r in m.tool_results]
    return f"answered after {done[-1].content}" if done else call("work", '{"step": 1}')


def traced() -> ReActAgent:
    """One call of ``work``, then the answer; any number of turns."""
    return ReActAgent(Spec(tools=[work], max_steps=4), ScriptedModel([_reply] * 1000))
