"""What the AG-UI tests share: a run's body, its SSE read as ``ag_ui.core`` events (each
validated by the package's own event union), and a run watched in the background."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
from ag_ui.core import BaseEvent, Event, EventType, Message, RunAgentInput, UserMessage
from pydantic import TypeAdapter

EVENT: TypeAdapter[Any] = TypeAdapter(Event)
_LINE = re.compile(r"\r\n|\r|\n")  # where the SSE spec ends a line, and nowhere else


def run_input(thread: str, run: str, text: str | None) -> dict[str, Any]:
    """A ``RunAgentInput`` as JSON, ending with a user message of ``text`` (none: no input)."""
    messages: list[Message] = [] if text is None else [UserMessage(id=f"m-{run}", content=text)]
    body = RunAgentInput(thread_id=thread, run_id=run, messages=messages, tools=[], context=[])
    dumped: dict[str, Any] = body.model_dump(mode="json", by_alias=True)
    return dumped


async def agui_events(response: httpx.Response) -> AsyncIterator[BaseEvent]:
    """The events of an AG-UI SSE answer, each parsed by ``ag_ui.core.Event``."""
    buffer = ""
    async for chunk in response.aiter_text():
        buffer += chunk
        while True:
            found = re.search(r"(\r\n|\r|\n){2}", buffer)
            if found is None:
                break
            frame, buffer = buffer[: found.start()], buffer[found.end() :]
            data = [line[5:].lstrip(" ") for line in _LINE.split(frame) if line.startswith("data:")]
            if data:
                event: BaseEvent = EVENT.validate_json("\n".join(data))
                yield event


def kinds(events: list[BaseEvent]) -> list[EventType]:
    """The events' types, in order."""
    return [event.type for event in events]


class Watch:
    """A run posted and read in a task of its own; ``events`` grows as they come."""

    def __init__(
        self, http: httpx.AsyncClient, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        self.events: list[BaseEvent] = []
        self.status = 0
        self._changed = asyncio.Event()
        self.task = asyncio.create_task(self._read(http, body, headers or {}))

    async def _read(
        self, http: httpx.AsyncClient, body: dict[str, Any], headers: dict[str, str]
    ) -> None:
        async with http.stream("POST", "/v1/ag-ui", json=body, headers=headers) as response:
            self.status = response.status_code
            if response.status_code != 200:
                await response.aread()
                self._changed.set()
                return
            async for event in agui_events(response):
                self.events.append(event)
                self._changed.set()
        self._changed.set()

    async def until(self, found: Callable[[list[BaseEvent]], bool], seconds: float = 30) -> None:
        """Wait until ``found(events)`` holds (the run must not end first)."""
        async with asyncio.timeout(seconds):
            while not found(self.events):
                if self.task.done():
                    self.task.result()
                    assert found(self.events), kinds(self.events)
                self._changed.clear()
                await self._changed.wait()

    async def done(self, seconds: float = 30) -> list[BaseEvent]:
        """All the run's events, once its stream ended."""
        async with asyncio.timeout(seconds):
            await self.task
        return self.events

    async def close(self) -> None:
        """Leave the stream (as a client closing its tab)."""
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


def has(kind: EventType, **fields: Any) -> Callable[[list[BaseEvent]], bool]:
    """A test of a list of events: one of ``kind`` with these fields' values."""

    def found(events: list[BaseEvent]) -> bool:
        return any(
            e.type == kind and all(getattr(e, k, None) == v for k, v in fields.items())
            for e in events
        )

    return found


def open_gate(gate: Path, step: int) -> None:
    """Let the gated ``work`` call of ``step`` return."""
    Path(f"{gate}.{step}").touch()
