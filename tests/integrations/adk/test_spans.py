"""An ADK turn's spans under the service: ADK's own OpenTelemetry tracer (scope
``gcp.vertex.agent``) uses the global tracer provider, so its ``invoke_workflow``,
``invoke_agent``, ``generate_content`` and ``execute_tool`` spans nest under the turn's
``invoke_agent`` span, in its trace, all with the session as ``gen_ai.conversation.id``
(the steering plugin puts it on ``execute_tool``, where ADK does not). The warm-up run an
ADKAgent does first is left out of the application's traces.
"""

from __future__ import annotations

import pytest
from google.adk.agents import LlmAgent
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from steerable.integrations.adk import ADKAgent, _warm
from steerable.service import Service
from steerable.stores.memory import MemoryStore
from tests.integrations.adk.scripted import ScriptedLlm, call, say
from tests.telemetry.conftest import spans  # noqa: F401


def _parent(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def _below(found: list[ReadableSpan], top: ReadableSpan) -> list[ReadableSpan]:
    """The spans under ``top``, at any depth."""
    children: dict[int, list[ReadableSpan]] = {}
    for span in found:
        children.setdefault(_parent(span) or 0, []).append(span)
    out: list[ReadableSpan] = []
    todo = [top]
    while todo:
        for child in children.get(todo.pop().context.span_id, []):
            out.append(child)
            todo.append(child)
    return out


async def test_adk_s_spans_nest_under_the_turn_s_span(
    spans: InMemorySpanExporter,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_warm, "_warm", False)  # this process's warm-up runs again, traced

    async def lookup(city: str) -> str:
        """The weather in ``city``."""
        return f"sunny in {city}"

    model = ScriptedLlm(model="scripted", script=[call("lookup", "c1", city="Rome"), say("sunny")])
    agent = ADKAgent(LlmAgent(name="a", model=model, tools=[lookup]))
    service = Service(MemoryStore(), agent, poll=0.05)
    async with service.serving():
        sent = await service.send("s", "weather?")
        done = await service.wait("s", sent.id, seconds=30)
    assert done is not None and (done.state, done.text) == ("completed", "sunny")
    found = list(spans.get_finished_spans())

    (turn,) = [s for s in found if s.name == "invoke_agent ADKAgent"]
    below = _below(found, turn)
    # everything recorded is the turn's: the warm-up's spans were not sampled
    assert sorted(s.name for s in found) == sorted(
        ["steerable send", turn.name, *(s.name for s in below)]
    )
    (workflow,) = [s for s in below if s.name == "invoke_workflow a"]
    assert _parent(workflow) == turn.context.span_id
    (run,) = [s for s in below if s.name == "invoke_agent a"]
    assert _parent(run) == workflow.context.span_id
    under_run = sorted(s.name for s in below if _parent(s) == run.context.span_id)
    assert under_run == [
        "execute_tool lookup",
        "generate_content scripted",
        "generate_content scripted",
    ]
    for span in below:
        assert span.context.trace_id == turn.context.trace_id
        assert span.instrumentation_scope is not None
        assert span.instrumentation_scope.name == "gcp.vertex.agent"
        assert span.attributes is not None
        assert span.attributes["gen_ai.conversation.id"] == "s", span.name
