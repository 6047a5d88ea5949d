"""OpenTelemetry ``chat`` and ``execute_tool`` spans of a served run, from the SDK's run hooks.

The Agents SDK's tracing is a system of its own (``agents.tracing``: traces and spans sent
to its processors, by default exported to OpenAI), not OpenTelemetry, so nothing of it
reaches an OpenTelemetry SDK. :class:`SpanHooks` makes the spans instead, when a provider is
set (:mod:`steerable.telemetry`): ``chat {model}`` from ``on_llm_start`` to ``on_llm_end``,
``execute_tool {name}`` from ``on_tool_start`` to ``on_tool_end``, each a child of the span
current as the run started (a service turn's ``invoke_agent``), ``gen_ai.conversation.id``
the session. They are started, not made current (a hook cannot hold a context open across
the SDK's code), so what a tool or the model client does inside is not under them. A
model call that fails (no ``on_llm_end``) is ended failed by :meth:`SpanHooks.close`; a
tool call that raised (the SDK answers it with its failure message) is marked failed, as
:mod:`._live` tells it (a tool with its own ``failure_error_function`` is not).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agents import RunConfig, RunHooks
from agents.models.interface import Model

from steerable import telemetry
from steerable.integrations import _spans
from steerable.integrations.openai_agents._journaled import recorded_text
from steerable.integrations.openai_agents._live import (
    function_call_of,
    noting_failures,
    tool_call_of,
)

if TYPE_CHECKING:
    from opentelemetry.trace import Span

__all__ = ["SpanHooks"]


class SpanHooks(RunHooks[Any]):
    """Run hooks that make the spans of a run on ``session``, then call ``own`` (if any)."""

    def __init__(self, session: str, config: RunConfig, own: RunHooks[Any] | None) -> None:
        self.session = session
        self.failed: set[str] = set()  # call ids answered with the SDK's failure message
        self.config = noting_failures(config, self.failed)
        """The run's config: give it to the run (it tells the hooks which calls failed)."""
        self.own = own
        self._chat: Span | None = None
        self._tools: dict[str, Span] = {}  # by call id: a reply's calls may run side by side

    async def on_llm_start(self, context: Any, agent: Any, *args: Any, **kwargs: Any) -> None:
        self.close("no reply")  # a request that never ended (the SDK retried it, say)
        provider, model = model_names(self.config.model or agent.model)
        self._chat = _spans.start_chat(self.session, model, provider)
        if self.own is not None:
            await self.own.on_llm_start(context, agent, *args, **kwargs)

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        span, self._chat = self._chat, None
        if span is not None:
            usage = response.usage
            _spans.replied(
                span,
                usage={"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens},
                response_id=response.response_id,
            )
            span.end()
        if self.own is not None:
            await self.own.on_llm_end(context, agent, response)

    async def on_agent_start(self, context: Any, agent: Any) -> None:
        if self.own is not None:
            await self.own.on_agent_start(context, agent)

    async def on_agent_end(self, context: Any, agent: Any, output: Any) -> None:
        if self.own is not None:
            await self.own.on_agent_end(context, agent, output)

    async def on_handoff(self, context: Any, from_agent: Any, to_agent: Any) -> None:
        if self.own is not None:
            await self.own.on_handoff(context, from_agent, to_agent)

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        call = tool_call_of(context)
        if call is not None:
            span = _spans.start_tool(self.session, call.name, call.id, call.arguments)
            if span is not None:
                self._tools[call.id] = span
        if self.own is not None:
            await self.own.on_tool_start(context, agent, tool)

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
        call = tool_call_of(context)
        span = None if call is None else self._tools.pop(call.id, None)
        if span is not None and call is not None:
            text = recorded_text(function_call_of(context, call), result)
            failed = call.id in self.failed
            self.failed.discard(call.id)
            _spans.tool_ended(span, text, is_error=failed)
            span.end()
        if self.own is not None:
            await self.own.on_tool_end(context, agent, tool, result)

    def close(self, error: BaseException | str | None) -> None:
        """End the spans still open (the run failed or stopped in them), failed with
        ``error`` (none: a stop)."""
        open_spans = [] if self._chat is None else [self._chat]
        open_spans += self._tools.values()
        self._chat = None
        self._tools.clear()
        for span in open_spans:
            telemetry.failed(span, error)
            span.end()


def model_names(model: str | Model | None) -> tuple[str | None, str]:
    """The provider and the name of a run's model (the SDK's ``provider/model`` names:
    a bare name is OpenAI's)."""
    if model is None:
        return "openai", "default"
    if isinstance(model, str):
        prefix, slash, rest = model.partition("/")
        return (prefix, rest) if slash and rest else ("openai", model)
    name = getattr(model, "model", None)
    ours = type(model).__module__.startswith("agents.models.openai")
    return ("openai" if ours else None), str(name) if isinstance(name, str) else type(
        model
    ).__name__
