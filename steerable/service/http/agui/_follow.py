"""One AG-UI run's events: the app's own event stream of the session, read as AG-UI.

The stream is :func:`steerable.service.http._sse.stream` (durable events with ids, live
deltas and tool calls, keep-alives, in the order it releases them), so a run follows a turn
exactly as ``GET /v1/sessions/{sid}/events`` does; this module turns each of its frames
into AG-UI events for the one turn the run follows (docs/protocols/ag-ui.md).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    MessagesSnapshotEvent,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunStartedEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from ag_ui.encoder import EventEncoder

from steerable.messages import Message as Stored
from steerable.messages import ToolCall as StoredCall
from steerable.messages import ToolResult
from steerable.service import Service
from steerable.service.http._context import Context
from steerable.service.http._live import Subscription
from steerable.service.http._sse import stream
from steerable.service.http.agui._messages import agui_messages, read_all, result_id, text_of
from steerable.service_store import InputView

__all__ = ["Run", "follow", "target_of"]

STEERED = "steerable.steer"
"""The CUSTOM event of a run whose input was offered to a turn already going."""
OWN_TURN = "steerable.own_turn"
"""The CUSTOM event of a run whose input, offered to a turn that ended first, is a turn of its
own: the run goes on with that turn."""
_ENDED = ("completed", "stopped", "failed", "max_steps")
_LINE_ENDS = {"\u2028": "\\u2028", "\u2029": "\\u2029", "\u0085": "\\u0085"}


def encode(encoder: EventEncoder, event: BaseEvent) -> str:
    """The package's SSE frame of ``event``, with U+2028, U+2029 and U+0085 escaped.

    Its JSON leaves them raw (valid JSON and valid SSE), but many line readers end a line
    there (as docs/http.md says of our own stream); in JSON they occur only inside strings,
    where the escape means the same character.
    """
    frame = encoder.encode(event)
    for raw, escaped in _LINE_ENDS.items():
        frame = frame.replace(raw, escaped)
    return frame


def target_of(view: InputView) -> str | None:
    """The turn an input's run follows: the turn that took it or it was offered to, else its
    own; None for a cancelled input."""
    if view.state == "cancelled":
        return None
    if view.state == "prompt" or view.turn is None:
        return view.id
    return view.turn


@dataclass
class Run:
    """What one AG-UI run has said of the turn it follows, so nothing is said twice."""

    service: Service
    session: str
    thread: str
    run: str
    target: str | None
    input: str | None = None
    reconnect: bool = False  # following a run already going: a snapshot first
    step: str | None = None
    text: str | None = None  # the live reply being streamed (its AG-UI message id)
    said: str = ""  # what the open live reply has said so far
    shown: list[str] = field(default_factory=list)  # live replies not matched to a stored one
    replies: int = 0
    calls: set[str] = field(default_factory=set)
    results: set[str] = field(default_factory=set)
    done: bool = False

    def started(self) -> BaseEvent:
        """RUN_STARTED, naming the session's turn in the metadata."""
        return RunStartedEvent(thread_id=self.thread, run_id=self.run, metadata=self._meta())

    def _meta(self) -> dict[str, Any]:
        return {"steerable": {"turn": self.target}}

    async def snapshot(self) -> BaseEvent:
        """MESSAGES_SNAPSHOT of the whole transcript."""
        stored = await read_all(self.service, self.session)
        return MessagesSnapshotEvent(messages=agui_messages(stored))

    def close_text(self) -> list[BaseEvent]:
        """TEXT_MESSAGE_END of the live reply, if one is open."""
        if self.text is None:
            return []
        message, self.text = self.text, None
        self.shown.append(_bare(self.said))
        self.said = ""
        return [TextMessageEndEvent(message_id=message)]

    def close_step(self) -> list[BaseEvent]:
        """STEP_FINISHED of the open step, if any."""
        if self.step is None:
            return []
        step, self.step = self.step, None
        return [StepFinishedEvent(step_name=step)]

    def open_step(self, step: int) -> list[BaseEvent]:
        """STEP_STARTED of step ``step`` (the open one finished first), unless it is open."""
        name = f"step {step}"
        if self.step == name:
            return []
        out = [*self.close_text(), *self.close_step(), StepStartedEvent(step_name=name)]
        self.step = name
        return out

    async def finish(self, state: str) -> list[BaseEvent]:
        """The run's last events once its turn ended in ``state`` (None: cancelled input)."""
        self.done = True
        out = [*self.close_text(), *self.close_step(), await self.snapshot()]
        if state == "failed":
            view = (
                None if self.target is None else await self.service.turn(self.session, self.target)
            )
            error = (view.error if view is not None else None) or "the turn failed"
            out.append(RunErrorEvent(message=error, code="turn_failed"))
        elif state in ("stopped", "cancelled"):
            out.append(
                RunFinishedEvent(
                    thread_id=self.thread,
                    run_id=self.run,
                    outcome=RunFinishedCancelledOutcome(),
                    metadata={"steerable": {"turn": self.target, "state": state}},
                )
            )
        else:
            out.append(
                RunFinishedEvent(
                    thread_id=self.thread,
                    run_id=self.run,
                    metadata={"steerable": {"turn": self.target, "state": state}},
                )
            )
        return out

    # -- live ---------------------------------------------------------------------------

    def delta(self, text: str) -> list[BaseEvent]:
        """A piece of the reply as the model writes it."""
        out: list[BaseEvent] = []
        if self.text is None:
            self.replies += 1
            self.text = f"{self.run}.reply.{self.replies}"
            out.append(TextMessageStartEvent(message_id=self.text, role="assistant"))
        out.append(TextMessageContentEvent(message_id=self.text, delta=text))
        self.said += text
        return out

    def tool(self, data: dict[str, Any]) -> list[BaseEvent]:
        """A tool call starting or ending, live."""
        call, name = str(data["call"]), str(data["name"])
        if data["phase"] == "started":
            return [*self.close_text(), *self._call(call, name, str(data["arguments"]), None)]
        return self._result(call, str(data["result"]))

    def _call(self, call: str, name: str, arguments: str, parent: str | None) -> list[BaseEvent]:
        if call in self.calls:
            return []
        self.calls.add(call)
        return [
            ToolCallStartEvent(tool_call_id=call, tool_call_name=name, parent_message_id=parent),
            ToolCallArgsEvent(tool_call_id=call, delta=arguments),
            ToolCallEndEvent(tool_call_id=call),
        ]

    def _result(self, call: str, content: str) -> list[BaseEvent]:
        if call in self.results:
            return []
        self.results.add(call)
        return [
            ToolCallResultEvent(
                message_id=result_id(call), tool_call_id=call, content=content, role="tool"
            )
        ]

    # -- durable --------------------------------------------------------------------------

    async def event(self, kind: str, turn: str | None, data: dict[str, Any]) -> list[BaseEvent]:
        """The AG-UI events of one durable event of the session."""
        if kind == "cancelled" and self.input is not None and data.get("id") == self.input:
            return await self.finish("cancelled")
        if turn != self.target or self.target is None:
            return []
        if kind in ("step", "steers_taken"):  # a step's steers are stored before its event
            return self.open_step(int(data["step"]))
        if kind == "message":
            return await self._message(int(data["position"]))
        if kind == "turn_ended":
            released = data.get("released") or []
            if self.input is not None and self.input != self.target and self.input in released:
                self.target = self.input
                out = [*self.close_text(), *self.close_step()]
                return [*out, CustomEvent(name=OWN_TURN, value={"turn": self.input})]
            return await self.finish(str(data["state"]))
        return []

    async def _message(self, position: int) -> list[BaseEvent]:
        page = await self.service.transcript(self.session, after=position - 1, limit=1)
        if not page or page[0].position != position:
            return []
        return self._stored(page[0].message)

    def _was_shown(self, text: str) -> bool:
        """Whether a live reply showed ``text`` (or its end, when the run came in the
        middle of it); that live reply is then matched."""
        whole = _bare(text)
        for i, said in enumerate(self.shown):
            if said and whole.endswith(said):
                del self.shown[: i + 1]
                return True
        return False

    def _stored(self, message: Stored) -> list[BaseEvent]:
        out: list[BaseEvent] = []
        if message.role == "assistant":
            out += self.close_text()
            text = text_of(message)
            if text and not self._was_shown(text):  # not seen live (another replica ran it)
                out += [
                    TextMessageStartEvent(message_id=message.id, role="assistant"),
                    TextMessageContentEvent(message_id=message.id, delta=text),
                    TextMessageEndEvent(message_id=message.id),
                ]
            for part in message.parts:
                if isinstance(part, StoredCall):
                    out += self._call(part.id, part.name, part.arguments, message.id)
            return out
        for part in message.parts:
            if isinstance(part, ToolResult):
                out += self._result(part.call_id, part.content)
        text = text_of(message)
        if message.steered and text:  # the steer, shown where the turn took it
            out += [
                TextMessageStartEvent(message_id=message.id, role="user"),
                TextMessageContentEvent(message_id=message.id, delta=text),
                TextMessageEndEvent(message_id=message.id),
            ]
        return out


def _bare(text: str) -> str:
    """``text`` without whitespace: a reply's pieces and its stored text can differ there."""
    return "".join(text.split())


def _parse(frame: str) -> tuple[str, dict[str, Any]] | None:
    """The kind and data of one of the app's SSE frames; None for a keep-alive."""
    kind, data = "message", ""
    for line in frame.split("\n"):
        name, _, value = line.partition(": ")
        if name == "event":
            kind = value
        elif name == "data":
            data = value
    if not data:
        return None
    parsed: dict[str, Any] = json.loads(data)
    return kind, parsed


async def follow(
    context: Context, run: Run, after: int, subscription: Subscription
) -> AsyncIterator[str]:
    """The AG-UI frames of ``run``: from RUN_STARTED to RUN_FINISHED or RUN_ERROR, following
    the session's events after event ``after`` and its live events on ``subscription``
    (made before the run's input was written)."""
    encoder = EventEncoder()
    yield encode(encoder, run.started())
    if run.reconnect:
        yield encode(encoder, await run.snapshot())
    if run.target is not None and run.input is not None and run.target != run.input:
        yield encode(
            encoder, CustomEvent(name=STEERED, value={"turn": run.target, "input": run.input})
        )
    for event in await _ended_already(run):
        yield encode(encoder, event)
    if run.done:
        return
    frames = stream(
        context.service,
        context.live,
        run.session,
        after,
        keepalive=context.keepalive,
        poll=context.poll,
        subscription=subscription,
    )
    try:
        async for frame in frames:
            parsed = _parse(frame)
            if parsed is None:
                yield frame  # a keep-alive comment
                continue
            for event in await _translate(run, *parsed):
                yield encode(encoder, event)
            if _over(run):
                return
    finally:
        await aclosing(frames)


def _over(run: Run) -> bool:
    return run.done


async def aclosing(frames: AsyncIterator[str]) -> None:
    """Close ``frames`` (an async generator) now, its subscription with it."""
    close = getattr(frames, "aclose", None)
    if close is not None:
        await close()


async def _ended_already(run: Run) -> list[BaseEvent]:
    """The last events, when the followed turn ended before the stream began (or there is
    none to follow)."""
    service = run.service
    while not run.done:
        if run.target is None:
            return await run.finish("cancelled" if run.input is not None else "completed")
        view = await service.turn(run.session, run.target)
        if view is None or view.state not in _ENDED:
            return []
        if run.input is not None and run.input != run.target:
            mine = await service.input(run.session, run.input)
            again = None if mine is None else target_of(mine)
            if again is not None and again != run.target:  # freed by the turn's end
                run.target = again
                return [
                    CustomEvent(name=OWN_TURN, value={"turn": again}),
                    *await _ended_already(run),
                ]
        return await run.finish(view.state)
    return []


async def _translate(run: Run, kind: str, data: dict[str, Any]) -> list[BaseEvent]:
    if kind == "delta":
        return run.delta(str(data["text"])) if data.get("turn") == run.target else []
    if kind == "tool":
        return run.tool(data) if data.get("turn") == run.target else []
    if kind == "unavailable":
        run.done = True
        detail = "the store is unavailable: post the same input again to follow the run"
        return [RunErrorEvent(message=detail, code="store_unavailable")]
    if kind == "refetch":
        return [await run.snapshot()]
    return await run.event(kind, data.get("turn"), data.get("data") or {})
