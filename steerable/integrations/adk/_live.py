"""A watched turn's live view of an ADK run: the model's text, and each tool call.

:class:`Live` gets the run's events (:meth:`Live.see`) and, through :class:`LiveTools` (a
plugin), ADK's tool hooks. A call is :class:`~steerable.events.ToolStarted` at ADK's
before-tool hook (the framework's call id, the tool's name, its arguments as JSON) and
:class:`~steerable.events.ToolEnded` when the run yields the event with its function
response: the response as the model will read it (after every after-tool and error
callback), as JSON, like the :class:`~steerable.ToolResult` view stored beside it. A call
that raised is an error result: answered by an error callback, with that answer; answered
by none (the run fails with the error), with the error, before the run's failure goes up.
A :func:`~._journaled.journaled` call the journal answered without running the tool is
``replayed`` (an earlier run's result), or an error result (UNKNOWN).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from typing import TYPE_CHECKING, Any

from google.adk.plugins.base_plugin import BasePlugin

from steerable.events import Event as LiveEvent
from steerable.events import EventSink, ToolEnded, ToolStarted
from steerable.integrations.adk._journaled import Answered
from steerable.messages import ToolCall, ToolResult
from steerable.models.base import TextDelta

if TYPE_CHECKING:
    from google.adk.events.event import Event
    from google.adk.tools.base_tool import BaseTool
    from google.adk.tools.tool_context import ToolContext

    from steerable.integrations.adk._sessions import SteerableSessionService

log = logging.getLogger("steerable.integrations.adk")


class Live:
    """Sends what a run does to a turn's sink: the model's text, each piece once, and each
    tool call's start and end.

    With SSE, ADK yields the pieces of a reply as partial events and then the whole reply
    as one event more: the pieces are sent and the whole is not. A reply with no partial
    text before it (a model that does not stream) is sent whole. A sink that fails does not
    fail the turn: its first failure is logged and the run goes on.
    """

    def __init__(self, sink: EventSink) -> None:
        self._sink = sink
        self._streamed = False  # pieces were sent since the last whole event
        self._failed = False
        self._open: dict[str, ToolCall] = {}  # calls started and not ended, by id
        self._errors: dict[str, str] = {}  # the started calls that raised: each error
        self.answered: dict[str, Answered] = {}  # journaled calls the journal answered

    async def see(self, event: Event) -> None:
        """Send the model's text in ``event`` that was not sent yet, and the end of each call
        ``event`` answers."""
        content = event.content
        if event.author == "user" or content is None or content.role == "user":
            for response in event.get_function_responses():
                if response.id is not None and response.id in self._open:
                    await self._ended(response.id, json.dumps(response.response or {}, default=str))
            return  # the prompt (run_async yields it if asked) or a tool's result
        text = "".join(p.text for p in content.parts or () if p.text and not p.thought)
        if event.partial:
            self._streamed = self._streamed or bool(text)
        elif self._streamed:
            self._streamed = False  # the whole of what the pieces already sent
            return
        if text:
            await self._send(TextDelta(text))

    async def started(self, call: ToolCall) -> None:
        """A tool call began."""
        self._open[call.id] = call
        self._errors.pop(call.id, None)
        self.answered.pop(call.id, None)
        await self._send(ToolStarted(call))

    def raised(self, call_id: str, error: BaseException) -> None:
        """A started call raised ``error`` (an error callback may still answer it)."""
        if call_id in self._open and not isinstance(error, asyncio.CancelledError):
            self._errors[call_id] = f"{type(error).__name__}: {error}"

    async def failed(self) -> None:
        """The run failed: each started call that raised ends with its error."""
        for call_id, error in list(self._errors.items()):
            if call_id in self._open:
                await self._ended(call_id, error)

    async def _ended(self, call_id: str, content: str) -> None:
        call = self._open.pop(call_id)
        error = self._errors.pop(call_id, None)
        answered = self.answered.pop(call_id, None)
        failed = error is not None or answered == "unknown"
        result = ToolResult(call.id, call.name, content, failed)
        await self._send(ToolEnded(call, result, replayed=answered == "replayed"))

    async def _send(self, event: LiveEvent) -> None:
        try:
            produced = self._sink(event)
            if inspect.isawaitable(produced):
                await produced
        except Exception:  # a watcher's failure is not the turn's; CancelledError goes on up
            if not self._failed:
                kind = "text delta" if isinstance(event, TextDelta) else "tool event"
                log.exception("the live sink failed on a %s; the turn goes on", kind)
            self._failed = True


class LiveTools(BasePlugin):
    """ADK's tool hooks for :class:`Live`: each call of ``service``'s runs starts, or raises.

    It answers nothing (each hook returns None), so it runs before the app's own plugins
    and sees every call start and every error, whichever plugin answers them.
    """

    def __init__(self, live: Live, service: SteerableSessionService) -> None:
        super().__init__(name="steerable_live_tools")
        self.live = live
        self.service = service

    def _ours(self, tool_context: ToolContext) -> bool:
        # not an AgentTool's inner runner: its events never reach this run's loop
        return tool_context._invocation_context.session_service is self.service

    async def before_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        """Send the call's start."""
        call_id = tool_context.function_call_id
        if call_id and self._ours(tool_context):
            arguments = json.dumps(tool_args, default=str)
            await self.live.started(ToolCall(call_id, tool.name, arguments))
        return None

    async def on_tool_error_callback(
        self,
        *,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        error: Exception,
    ) -> dict[str, Any] | None:
        """Note the call's error: its end is an error result."""
        call_id = tool_context.function_call_id
        if call_id and self._ours(tool_context):
            self.live.raised(call_id, error)
        return None
