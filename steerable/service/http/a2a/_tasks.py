"""A turn as an A2A task: its id, its state, its history (the turn's messages) and its
artifact (the answer), built from the service's views with the SDK's own protobuf types.

A task id names the turn *and* its context: ``<turn>@<context as base64url>``. A2A's
``GetTask``, ``CancelTask`` and ``SubscribeToTask`` carry the task id alone, and one
service holds many sessions, so the id must say which session its turn is in; the turn
part is the prompt's input id, which is the A2A message id of the send that started it.
"""

from __future__ import annotations

import base64
import binascii

from a2a.types.a2a_pb2 import (
    Artifact,
    Message,
    Part,
    Role,
    Task,
    TaskState,
    TaskStatus,
)

from steerable.messages import Message as Said
from steerable.messages import Text, ToolCall, ToolResult, new_id
from steerable.service import Service
from steerable.service._service import MAX_PAGE
from steerable.service_store import InputView, TurnView

__all__ = [
    "OVER",
    "STATES",
    "agent_note",
    "decode_task",
    "encode_task",
    "task_of",
    "to_a2a",
]

STATES: dict[str, TaskState] = {
    "queued": TaskState.TASK_STATE_SUBMITTED,
    "running": TaskState.TASK_STATE_WORKING,
    "completed": TaskState.TASK_STATE_COMPLETED,
    "stopped": TaskState.TASK_STATE_CANCELED,
    # out of steps is not done: the agent did not finish its work (its last text, if any,
    # is still the artifact, and the status message says max_steps)
    "max_steps": TaskState.TASK_STATE_FAILED,
    "failed": TaskState.TASK_STATE_FAILED,
}
"""A turn's state -> its task's state."""

OVER = ("completed", "stopped", "failed", "max_steps")


def encode_task(context_id: str, turn: str) -> str:
    """The task id of ``turn`` in the context ``context_id``."""
    packed = base64.urlsafe_b64encode(context_id.encode("utf-8")).decode("ascii").rstrip("=")
    return f"{turn}@{packed}"


def decode_task(task_id: str) -> tuple[str, str] | None:
    """The context id and the turn of a task id; None when it is not one of ours."""
    turn, at, packed = task_id.rpartition("@")
    if not at or not turn or not packed:
        return None
    try:
        context_id = base64.urlsafe_b64decode(packed + "=" * (-len(packed) % 4)).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    return (context_id, turn) if context_id else None


def agent_note(text: str, context_id: str, task_id: str) -> Message:
    """A short message of the agent's about the task (a status message)."""
    return Message(
        message_id=new_id(),
        context_id=context_id,
        task_id=task_id,
        role=Role.ROLE_AGENT,
        parts=[Part(text=text)],
    )


def _data(payload: dict[str, object]) -> Part:
    part = Part()
    part.data.struct_value.update(payload)
    return part


def to_a2a(message: Said, context_id: str, task_id: str) -> Message | None:
    """A transcript message as an A2A message (text, and tool calls and results as data
    parts); None when it has nothing A2A can carry."""
    parts: list[Part] = []
    for part in message.parts:
        if isinstance(part, Text):
            parts.append(Part(text=part.text))
        elif isinstance(part, ToolCall):
            call = {"id": part.id, "name": part.name, "arguments": part.arguments}
            parts.append(_data({"tool_call": call}))
        elif isinstance(part, ToolResult):
            result = {"call_id": part.call_id, "name": part.name, "content": part.content}
            parts.append(_data({"tool_result": {**result, "is_error": part.is_error}}))
    if not parts:
        return None
    said = Message(
        message_id=message.id,
        context_id=context_id,
        task_id=task_id,
        role=Role.ROLE_USER if message.role == "user" else Role.ROLE_AGENT,
        parts=parts,
    )
    if message.steered:
        said.metadata.update({"steered": True})
    return said


async def _history(
    service: Service, session: str, view: TurnView, context_id: str, task_id: str
) -> list[Message]:
    """The turn's messages, from the transcript (its prompt first)."""
    if view.start is None:
        return []
    found: list[Message] = []
    after = view.start - 1
    while True:
        page = await service.transcript(session, after=after, limit=MAX_PAGE)
        for entry in page:
            if view.end is not None and entry.position >= view.end:
                return found
            if entry.turn == view.id:
                said = to_a2a(entry.message, context_id, task_id)
                if said is not None:
                    found.append(said)
        if len(page) < MAX_PAGE or (view.end is None and page[-1].turn != view.id):
            return found
        after = page[-1].position


def _status(state: TaskState, at: float | None, note: Message | None) -> TaskStatus:
    status = TaskStatus(state=state)
    if at is not None:
        status.timestamp.FromNanoseconds(int(at * 1e9))
    if note is not None:
        status.message.CopyFrom(note)
    return status


async def task_of(
    service: Service,
    session: str,
    context_id: str,
    turn: str,
    *,
    history_length: int | None = None,
    note: str | None = None,
) -> Task | None:
    """The task of ``turn`` now; None when no send started it (no such task).

    ``note``: the status message (else one saying how a turn that is over ended).
    """
    task_id = encode_task(context_id, turn)
    view = await service.turn(session, turn)
    if view is None:
        return await _waiting_task(service, session, context_id, turn, history_length, note)
    history = await _history(service, session, view, context_id, task_id)
    if view.state == "queued" and not history:
        prompt = await service.input(session, turn)
        if prompt is not None:
            history = [_prompt(prompt, context_id, task_id)]
    if history_length:
        history = history[-history_length:]
    said = note
    if said is None and view.state in ("stopped", "failed", "max_steps"):
        said = f"the turn ended: {view.state}" + (f" ({view.error})" if view.error else "")
    at = view.ended_at or view.started_at
    status = _status(
        STATES[view.state], at, None if said is None else agent_note(said, context_id, task_id)
    )
    task = Task(id=task_id, context_id=context_id, status=status, history=history)
    task.metadata.update({"steps": view.steps, "steers_taken": view.steers_taken})
    if view.state in OVER and view.text:
        task.artifacts.append(
            Artifact(artifact_id=f"{turn}:answer", name="answer", parts=[Part(text=view.text)])
        )
    return task


def _prompt(prompt: InputView, context_id: str, task_id: str) -> Message:
    return Message(
        message_id=prompt.id,
        context_id=context_id,
        task_id=task_id,
        role=Role.ROLE_USER,
        parts=[Part(text=prompt.text)],
    )


async def _waiting_task(
    service: Service,
    session: str,
    context_id: str,
    turn: str,
    history_length: int | None,
    note: str | None,
) -> Task | None:
    """The task of a prompt that is not a turn yet: waiting (submitted) or cancelled."""
    prompt = await service.input(session, turn)
    if prompt is None or prompt.state not in ("waiting", "cancelled"):
        return None
    if prompt.kind == "steer" and prompt.turn is not None:  # offered to a turn: not a task
        return None
    task_id = encode_task(context_id, turn)
    state = (
        TaskState.TASK_STATE_SUBMITTED
        if prompt.state == "waiting"
        else TaskState.TASK_STATE_CANCELED
    )
    said = None if note is None else agent_note(note, context_id, task_id)
    history = [_prompt(prompt, context_id, task_id)][-(history_length or 1) :]
    return Task(
        id=task_id,
        context_id=context_id,
        status=_status(state, prompt.at or None, said),
        history=history,
    )
