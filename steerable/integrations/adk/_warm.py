"""ADK's first run in a process, done once before any turn holds a lease.

ADK imports most of its run machinery lazily, inside the first ``Runner.run_async``: the
LLM flows, the workflow engine and, through it, the auth stack (authlib, cryptography,
requests), some 550 modules in google-adk 2.13. Those imports run on the event loop and
hold it for 0.4 s to 1.2 s (measured on two busy cores). A replica whose loop is held that
long misses its lease renewals: with a 1 s lease the first turn a replica served was fenced
and carried on again by the same replica. :func:`warm_up` pays that cost once, up front,
with a tiny keyless run (a stub model, one tool, our session service and plugin over a
memory store) on a loop of its own in a thread.

What it does not do, and what it costs:

- The caller waits for it. Built on a running loop (an ``ADKAgent`` made inside an async
  app), that loop is blocked for the warm-up's length, about 0.5 s: harmless only when
  the loop holds no lease yet (a replica builds its agent before it serves).
- It waits at most :data:`TIMEOUT`. A warm-up that hangs (ADK's first run stuck) is left
  running in its daemon thread, logged, and not tried again: the first turn pays the
  imports it did not finish.
- It is a real ADK invocation (app and agent ``warm_up``), run under an unsampled parent
  span, so an OpenTelemetry SDK with the default (parent-based) sampler records none of the
  spans ADK makes for it; a sampler that ignores the parent still sees them.
- It warms ADK's own machinery only. A real model's lazy imports (the Gemini client's
  HTTP stack, LiteLLM) happen at that model's first call, on the turn's loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
from collections.abc import AsyncGenerator, Iterator

from google.adk.agents.llm_agent import LlmAgent
from google.adk.apps import App
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.genai import types

from steerable import telemetry
from steerable.integrations.adk._plugin import SteeringPlugin
from steerable.integrations.adk._sessions import SteerableSessionService
from steerable.stores.memory import MemoryStore

__all__ = ["warm_up"]

log = logging.getLogger("steerable.integrations.adk")

TIMEOUT = 30.0  # seconds: ten times the slowest warm-up measured on two busy cores

_lock = threading.Lock()
_warm = False


def warm_up() -> None:
    """Run one tiny ADK invocation in this process, once (later calls return at once).

    It runs on an event loop of its own in a thread, so it can be called from a running
    loop, which is blocked while the caller waits (about 0.5 s, at most :data:`TIMEOUT`).
    A failure or a timeout is logged, not raised: the warm-up only moves a cost, and a
    real run reports a real problem itself.
    """
    global _warm
    with _lock:
        if _warm:
            return
        failed: list[BaseException] = []

        def run() -> None:
            try:
                with _unsampled():
                    asyncio.run(_one_run())
            except Exception as exc:  # reported below, in the caller's thread
                failed.append(exc)

        thread = threading.Thread(target=run, name="steerable-adk-warm-up", daemon=True)
        thread.start()
        thread.join(TIMEOUT)
        if thread.is_alive():
            log.warning(
                "ADK warm-up run did not end within %.0f s; going on without it (the first"
                " turn pays ADK's imports)",
                TIMEOUT,
            )
        elif failed:
            log.warning(
                "ADK warm-up run failed; the first turn pays ADK's imports", exc_info=failed[0]
            )
        _warm = True


@contextlib.contextmanager
def _unsampled() -> Iterator[None]:
    """The warm-up's spans left out of the application's traces: their parent is a span
    context not sampled, so a parent-based sampler (the SDK's default) drops them all."""
    if telemetry.tracer() is None:
        yield
        return
    from opentelemetry import context, trace

    parent = trace.NonRecordingSpan(
        trace.SpanContext(
            trace_id=random.getrandbits(128) or 1,
            span_id=random.getrandbits(64) or 1,
            is_remote=True,
            trace_flags=trace.TraceFlags(trace.TraceFlags.DEFAULT),
        )
    )
    token = context.attach(trace.set_span_in_context(parent))
    try:
        yield
    finally:
        context.detach(token)


class _Stub(BaseLlm):
    """Calls the tool once, then answers: the two kinds of step a run has."""

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        """A call of ``noop`` first, the answer after its result."""
        last = (llm_request.contents[-1].parts or []) if llm_request.contents else []
        if any(part.function_response is not None for part in last):
            part = types.Part(text="done")
        else:
            part = types.Part(function_call=types.FunctionCall(name="noop", args={}, id="w"))
        yield LlmResponse(content=types.Content(role="model", parts=[part]))


def noop() -> str:
    """Does nothing."""
    return "ok"


async def _one_run() -> None:
    service = SteerableSessionService(MemoryStore())
    agent = LlmAgent(name="warm_up", model=_Stub(model="stub"), tools=[noop])
    app = App(name="warm_up", root_agent=agent, plugins=[SteeringPlugin(service)])
    runner = Runner(app=app, session_service=service)
    try:
        await service.create_session(app_name="warm_up", user_id="u", session_id="w")
        message = types.Content(role="user", parts=[types.Part(text="go")])
        async for _ in runner.run_async(user_id="u", session_id="w", new_message=message):
            pass
    finally:
        await runner.close()
