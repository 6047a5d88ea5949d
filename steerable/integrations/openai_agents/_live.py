"""A watched turn's live events: the model's text deltas and each function tool call.

Each function tool call is a :class:`~steerable.events.ToolStarted` as the SDK's run hooks
see it start (``on_tool_start``) and a :class:`~steerable.events.ToolEnded` as they see it
end (``on_tool_end``), under the model's call id, the tool's name and the call's arguments
(the model's JSON text). The result is the text the model reads: a ``str`` as it is, any
other output as the SDK converts it (see :func:`recorded_text`). A call that raised is an
error: the SDK answers it with its default failure message, and tells the run config's
``tool_error_formatter`` of it first (a tool with a ``failure_error_function`` of its own
answers as it likes: that is not told, so not an error here). A journaled call the
journal answered is replayed (a recorded result) or an error (an interrupted call's
UNKNOWN). The calls a turn carries on after a crash (run by the session's first step, not
by the SDK: ``SteerableSession._carry_on``) go through the same hooks; their failures are
not told to a formatter (the step's tool context has no run config), so they are not errors
here unless the journal answered UNKNOWN.

The SDK's hosted tools (run by the provider) and tools whose hooks get no call context
(computer, local shell) have no events.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
from typing import Any

from agents import RunConfig, RunHooks
from agents.run_config import ToolErrorFormatterArgs
from agents.tool_context import ToolContext as SDKToolContext
from openai.types.responses import ResponseFunctionToolCall

from steerable.events import Event, EventSink, ToolEnded, ToolStarted
from steerable.integrations.openai_agents._journaled import recorded_text
from steerable.messages import ToolCall, ToolResult

__all__ = ["ToolEvents", "Watcher", "function_call_of", "noting_failures", "tool_call_of"]

log = logging.getLogger("steerable.integrations.openai_agents")


class Watcher:
    """The turn's event sink: an event it fails on is logged (once a turn) and the turn
    goes on (a live event is a view of the run, not part of it)."""

    def __init__(self, sink: EventSink, session: str, turn: str) -> None:
        self.sink = sink
        self.session = session
        self.turn = turn
        self.failed = False

    async def send(self, event: Event) -> None:
        """Give ``event`` to the sink, awaiting what it returns."""
        try:
            produced = self.sink(event)
            if inspect.isawaitable(produced):
                await produced
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not self.failed:  # once a turn: a sink that always fails floods no log
                self.failed = True
                log.warning(
                    "session %r: the live sink failed on turn %r; the turn goes on",
                    self.session,
                    self.turn,
                    exc_info=exc,
                )


class ToolEvents(RunHooks[Any]):
    """Run hooks that send each function tool call's start and end to ``watcher``.

    :meth:`run_config` adds the config's part (which calls failed); :attr:`answered` is
    what the journal answered (filled under ``noting_answers``).
    """

    def __init__(self, watcher: Watcher) -> None:
        self.watcher = watcher
        self.failed: set[str] = set()  # call ids answered with the SDK's failure message
        self.answered: dict[str, tuple[bool, bool]] = {}

    def run_config(self, config: RunConfig) -> RunConfig:
        """``config``, its ``tool_error_formatter`` (if any) told first of a failed call."""
        return noting_failures(config, self.failed)

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        call = tool_call_of(context)
        if call is not None:
            await self.watcher.send(ToolStarted(call))

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
        call = tool_call_of(context)
        if call is None:
            return
        replayed, unknown = self.answered.pop(call.id, (False, False))
        failed = call.id in self.failed
        self.failed.discard(call.id)
        text = recorded_text(function_call_of(context, call), result)
        ended = ToolResult(call.id, call.name, text, failed or unknown)
        await self.watcher.send(ToolEnded(call, ended, replayed=replayed))


def noting_failures(config: RunConfig, failed: set[str]) -> RunConfig:
    """``config`` whose ``tool_error_formatter`` (if any) is told of a failed call after
    its id goes into ``failed`` (the SDK's default message answers it otherwise)."""
    own = config.tool_error_formatter

    async def tool_error_formatter(args: ToolErrorFormatterArgs[Any]) -> str | None:
        if args.kind == "tool_exception":
            failed.add(args.call_id)
        if own is None:
            return None  # the SDK's default message
        message = own(args)
        return await message if inspect.isawaitable(message) else message

    return dataclasses.replace(config, tool_error_formatter=tool_error_formatter)


def tool_call_of(context: Any) -> ToolCall | None:
    """The call a tool hook's context is about, if it carries one."""
    if not isinstance(context, SDKToolContext):
        return None
    return ToolCall(context.tool_call_id, context.tool_name, context.tool_arguments)


def function_call_of(context: SDKToolContext[Any], call: ToolCall) -> ResponseFunctionToolCall:
    """The model's function call a tool hook's context is about (rebuilt if it has none)."""
    given = context.tool_call
    if isinstance(given, ResponseFunctionToolCall):
        return given
    return ResponseFunctionToolCall(
        arguments=call.arguments, call_id=call.id, name=call.name, type="function_call"
    )
