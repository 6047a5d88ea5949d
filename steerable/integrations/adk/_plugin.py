"""The ADK plugin that takes a session's steers before each model call, in place.

ADK builds ``llm_request.contents`` from the session's events afresh at every step, so a
steer added to the request alone would last one request. The plugin therefore also puts it
into the running session's events, where every later request is built from, and the
session service has already stored it, in place, with the same atomic call that took it.
The steer is never written into the ADK session from outside the running process (ADK
refuses a stale session then): it waits in the steerable box until the run takes it.

Before a tool runs, the plugin puts the session on ADK's ``execute_tool`` span (ADK's
OpenTelemetry spans use the global tracer provider, so they nest under the service turn's
``invoke_agent`` span; that one alone lacks ``gen_ai.conversation.id``).

Before a :func:`~._journaled.journaled` tool runs, the plugin stores the events held so far
(the reply that called it among them, taking no steer): a run killed inside the tool is then
carried on with that same call, under its id, which is what the tool journal is keyed by.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from google.adk.agents.base_agent import BaseAgent
from google.adk.agents.llm_agent import LlmAgent
from google.adk.plugins.base_plugin import BasePlugin

from steerable import telemetry
from steerable.errors import UsageError
from steerable.integrations.adk import _records
from steerable.integrations.adk._journaled import is_journaled
from steerable.integrations.adk._sessions import SteerableSessionService

if TYPE_CHECKING:
    from google.adk.agents.callback_context import CallbackContext
    from google.adk.agents.invocation_context import InvocationContext
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.adk.tools.base_tool import BaseTool
    from google.adk.tools.tool_context import ToolContext
    from google.genai import types

__all__ = ["SteeringPlugin"]


class SteeringPlugin(BasePlugin):
    """Takes the steers of ``service``'s sessions at each model call of a run.

    Only a run whose root agent is an :class:`LlmAgent` takes steers; under a workflow root
    (``SequentialAgent`` and the like) each step still stores the run's events, and the
    steers wait. A run of another session service (an ``AgentTool``'s inner runner) is
    left alone.
    """

    def __init__(self, service: SteerableSessionService, name: str = "steerable_steering"):
        if not isinstance(service, SteerableSessionService):
            raise UsageError(
                f"SteeringPlugin takes a SteerableSessionService, not {type(service).__name__}"
            )
        super().__init__(name=name)
        self.service = service

    def _ours(self, context: InvocationContext) -> bool:
        return context.session_service is self.service

    async def before_run_callback(
        self, *, invocation_context: InvocationContext
    ) -> types.Content | None:
        """Hold the run's events until its steps store them."""
        if self._ours(invocation_context):
            self.service.hold(invocation_context.session, invocation_context.invocation_id)
        return None

    async def before_model_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        """Store the step's events, take the steers waiting and add them after the results."""
        context = callback_context._invocation_context
        if not self._ours(context):
            return None
        session = context.session
        taken = await self.service.step(session, take=takes_steers(context))
        for message in taken:
            event = _records.steer_event(message, session.events[-1] if session.events else None)
            # in the running session (every later request is built from it) and in this one
            session.events.append(event)
            assert event.content is not None
            llm_request.contents.append(event.content.model_copy(deep=True))
        return None

    async def before_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        """Before a :func:`journaled` tool runs, store the reply that called it.

        ADK's ``execute_tool`` span (current here) gets the session as
        ``gen_ai.conversation.id``, which ADK puts on its other spans but not on that one."""
        context = tool_context._invocation_context
        if not self._ours(context):
            return None
        if telemetry.tracer() is not None:
            from opentelemetry import trace

            trace.get_current_span().set_attribute("gen_ai.conversation.id", context.session.id)
        if is_journaled(getattr(tool, "func", None)):
            await self.service.store_held(context.session)
        return None

    async def after_run_callback(self, *, invocation_context: InvocationContext) -> None:
        """Store the rest of the run's events."""
        if self._ours(invocation_context):
            await self.service.release(
                invocation_context.session,
                finished=True,
                invocation=invocation_context.invocation_id,
            )

    async def on_run_error_callback(
        self, *, invocation_context: InvocationContext, error: Exception
    ) -> None:
        """Store the failed run's events up to where no function call was still open."""
        if self._ours(invocation_context):
            await self.service.release(
                invocation_context.session,
                finished=False,
                invocation=invocation_context.invocation_id,
            )


def takes_steers(context: InvocationContext) -> bool:
    """Whether the run of ``context`` takes steers: its root agent is an LlmAgent."""
    agent = context.agent
    return isinstance(agent, BaseAgent) and isinstance(agent.root_agent, LlmAgent)
