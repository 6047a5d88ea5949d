"""ADK events as steerable messages, and back.

Each ADK event is kept verbatim: its own JSON (``Event.model_dump_json``) in a
:class:`~steerable.Native` part of framework ``"adk"``, in a message under the event's id.
Two kinds of message are steerable's own instead, because each records an input exactly once
under the input's id:

- a turn's prompt: the user event the runner appends for ``new_message``, stored as a plain
  user message under the prompt's id, with ADK's event beside its text (so a retry finds
  the invocation it started);
- a steer: the steered user message the atomic take recorded. It has no ADK record of its
  own; :func:`steer_event` makes the same event from it every time (the steer's id, the
  invocation and branch of the event before it), live and when a session is loaded again.

Beside an event's record, each of its function calls has a :class:`~steerable.ToolCall`
view and each function response a :class:`~steerable.ToolResult` view (as the Agents SDK's
integration stores them): a reply stored before its journaled tool ran is then not read as
a turn's answer by the service, and the transcript is a valid one to steerable.

A session made by :meth:`SteerableSessionService.create_session` starts with a header
message (app, user, initial state): the ADK session's own fields, which no event carries.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from google.adk.events.event import Event
from google.adk.sessions.state import State
from google.genai import types

from steerable.messages import Message, Native, Part, Text, ToolCall, ToolResult

FRAMEWORK = "adk"
_HEADER = "adk_session"


def event_text(event: Event) -> str:
    """What a person reads of ``event``: its text, else its calls and results by name."""
    content = event.content
    if content is None or not content.parts:
        return ""
    said: list[str] = []
    for part in content.parts:
        if part.text and not part.thought:
            said.append(part.text)
        elif part.function_call is not None:
            said.append(f"[call {part.function_call.name}]")
        elif part.function_response is not None:
            said.append(f"[result {part.function_response.name}]")
    return "".join(said) if all(not s.startswith("[") for s in said) else " ".join(said)


def user_text(event: Event) -> str | None:
    """The text of a user's own message (no function response in it), else None."""
    content = event.content
    if event.author != "user" or content is None or not content.parts:
        return None
    if any(p.function_response is not None for p in content.parts):
        return None
    return "".join(p.text or "" for p in content.parts)


def event_json(event: Event) -> str:
    """``event`` as it is stored: its own JSON, without the fields it leaves unset."""
    return event.model_dump_json(exclude_none=True, by_alias=True)


def event_message(event: Event, *, message_id: str, prompt: bool = False) -> Message:
    """The message that stores ``event`` under ``message_id``: a plain user message when it
    is the turn's ``prompt``, else the event alone."""
    data = event_json(event)
    text = event_text(event)
    if prompt:
        return Message(
            "user", (Text(user_text(event) or ""), Native(FRAMEWORK, data, text)), message_id
        )
    content = event.content
    user = event.author == "user" or (content is not None and content.role == "user")
    parts: list[Part] = [Native(FRAMEWORK, data, text), *_views(event)]
    return Message("user" if user else "assistant", tuple(parts), message_id)


def _views(event: Event) -> list[Part]:
    """A steerable view of each function call and response of ``event``, beside its record.

    A reply's calls are stored before its tools run (for the tool journal), so the reply
    can be the last stored message of a turn: its :class:`ToolCall` views tell the service
    it is not the turn's answer, and the responses' :class:`ToolResult` views answer them.
    """
    views: list[Part] = []
    for call in event.get_function_calls():
        if call.id and call.name:
            views.append(ToolCall(call.id, call.name, json.dumps(call.args or {})))
    for response in event.get_function_responses():
        if response.id and response.name:
            content = json.dumps(response.response or {}, default=str)
            views.append(ToolResult(response.id, response.name, content))
    return views


def stored_json(messages: Iterable[Message], event_id: str) -> list[str]:
    """The stored JSON of each event of ``messages`` whose id is ``event_id``."""
    found: list[str] = []
    for message in messages:
        native = _native(message)
        if native is None or header_of(message) is not None:
            continue
        if json.loads(native.data).get("id") == event_id:
            found.append(native.data)
    return found


def header_message(app_name: str, user_id: str, state: dict[str, Any], created: float) -> Message:
    """The first message of a session the service created: the ADK session's own fields."""
    record = {
        _HEADER: {"app_name": app_name, "user_id": user_id, "state": state, "created": created}
    }
    return Message("user", (Native(FRAMEWORK, json.dumps(record), ""),))


def header_of(message: Message) -> dict[str, Any] | None:
    """The header record ``message`` holds, or None when it is not a header."""
    native = _native(message)
    if native is None or not native.data.startswith('{"' + _HEADER):
        return None
    header: dict[str, Any] = json.loads(native.data)[_HEADER]
    return header


def steer_event(message: Message, before: Event | None) -> Event:
    """The ADK user event of the steer ``message``, placed after the event ``before``."""
    return Event(
        id=message.id,
        author="user",
        invocation_id=before.invocation_id if before is not None else f"steer-{message.id}",
        branch=before.branch if before is not None else None,
        timestamp=before.timestamp if before is not None else 0.0,
        content=types.Content(role="user", parts=[types.Part(text=message.text)]),
    )


def plain_event(message: Message, before: Event | None, author: str) -> Event:
    """An ADK event for a plain steerable message (a prompt not stored yet, an earlier turn
    of another agent): a user message, or ``author``'s reply."""
    user = message.role == "user"
    return Event(
        id=message.id,
        author="user" if user else author,
        # a message of its own invocation: one a retry of this turn can be resumed by
        invocation_id=f"steerable-{message.id}",
        timestamp=before.timestamp if before is not None else 0.0,
        content=types.Content(
            role="user" if user else "model", parts=[types.Part(text=message.text)]
        ),
    )


def events_of(messages: Sequence[Message], author: str) -> list[Event]:
    """The ADK events ``messages`` store, in transcript order (headers left out)."""
    events: list[Event] = []
    for message in messages:
        before = events[-1] if events else None
        native = _native(message)
        if native is not None:
            if header_of(message) is None:
                events.append(Event.model_validate_json(native.data))
        elif message.steered:
            events.append(steer_event(message, before))
        else:
            events.append(plain_event(message, before, author))
    return events


def session_state(header: dict[str, Any] | None, events: Sequence[Event]) -> dict[str, Any]:
    """A session's state: the header's initial state, then each event's delta in order."""
    state: dict[str, Any] = dict(header["state"]) if header else {}
    for event in events:
        if event.actions and event.actions.state_delta:
            for key, value in event.actions.state_delta.items():
                if not key.startswith(State.TEMP_PREFIX):
                    state[key] = value
    return state


def _native(message: Message) -> Native | None:
    return next(iter(message.natives(FRAMEWORK)), None)
