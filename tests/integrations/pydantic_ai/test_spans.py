"""A Pydantic AI turn's spans under the service: Pydantic AI's own OpenTelemetry
instrumentation (the ``Instrumentation`` capability) uses the global tracer provider, so its
``invoke_agent``, ``chat`` and ``execute_tool`` spans nest under the turn's ``invoke_agent``
span, in its trace, and carry the session (the run's ``conversation_id``) as
``gen_ai.conversation.id``.
"""

from __future__ import annotations

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic_ai import Agent
from pydantic_ai.capabilities.instrumentation import Instrumentation

from steerable.integrations.pydantic_ai import PydanticAIAgent
from steerable.service import Service
from steerable.stores.memory import MemoryStore
from tests.integrations.pydantic_ai.support import Script, call, say
from tests.telemetry.conftest import spans  # noqa: F401

ROME = '{"city":"Rome"}'


def _parent(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def _named(found: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in found if s.name == name]


async def test_pydantic_ai_s_spans_nest_under_the_turn_s_span(
    spans: InMemorySpanExporter,  # noqa: F811
) -> None:
    script = Script(call("lookup", "c1", ROME), say("sunny"))
    agent = Agent(script.model, name="weather", capabilities=[Instrumentation()])

    @agent.tool_plain
    def lookup(city: str) -> str:
        """The weather in ``city``."""
        return "sunny"

    service = Service(MemoryStore(), PydanticAIAgent(agent), poll=0.05)
    async with service.serving():
        for prompt in ("weather?", "and tomorrow?"):  # the second run continues the session
            sent = await service.send("s", prompt)
            done = await service.wait("s", sent.id, seconds=10)
            assert done is not None and done.state == "completed", done
            script.replies.extend([call("lookup", "c2", ROME), say("sunny again")])
    found = list(spans.get_finished_spans())

    turns = _named(found, "invoke_agent PydanticAIAgent")  # ours, one per turn
    runs = _named(found, "invoke_agent weather")  # Pydantic AI's, one per run
    assert len(turns) == 2 and len(runs) == 2
    by_id = {s.context.span_id: s for s in found}
    for turn in turns:
        (run,) = [r for r in runs if _parent(r) == turn.context.span_id]
        assert run.context.trace_id == turn.context.trace_id
        below = [s for s in found if _parent(s) == run.context.span_id]
        names = sorted(s.name for s in below)
        assert names == ["chat function:_answer:_stream"] * 2 + ["execute_tool lookup"], names
        for span in [run, *below]:
            assert span.instrumentation_scope is not None
            assert span.instrumentation_scope.name == "pydantic-ai"
            assert span.attributes is not None
            assert span.attributes["gen_ai.conversation.id"] == "s"
            assert by_id[_parent(span) or 0] in (turn, run)
