"""Following a turn's durable events as A2A stream events, on any replica.

The events come from the store (``service.events``), so a stream opened on another replica
after the one serving it died (``SubscribeToTask``) sees the same turn go on; the live feed
only wakes the follower (a write was made, or a reply is being written) so it reads at once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from a2a.types.a2a_pb2 import (
    Artifact,
    Part,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)

from steerable.service._service import MAX_PAGE
from steerable.service.http._context import Context
from steerable.service.http.a2a._tasks import STATES, agent_note, encode_task, to_a2a
from steerable.service_store import ServiceEvent

__all__ = ["follow"]

FIRST_POLL = 0.05

Update = TaskStatusUpdateEvent | TaskArtifactUpdateEvent


async def follow(
    context: Context, session: str, context_id: str, turn: str, after: int
) -> AsyncIterator[Update]:
    """The updates of ``turn`` from the events after ``after``, until it ends."""
    service = context.service
    async with context.live.subscribe(session) as woken:
        read, pause = after, FIRST_POLL
        while True:
            events = await service.events(session, after=read, limit=MAX_PAGE)
            for event in events:
                read = event.id
                if event.turn != turn:
                    continue
                async for update in _updates(context, session, context_id, turn, event):
                    yield update
                if event.kind == "turn_ended":
                    return
            if events:
                pause = FIRST_POLL
                continue
            if await woken.wait(pause):
                while woken.pop() is not None:  # a wake or a reply's piece: read now
                    pass
                pause = FIRST_POLL
            else:
                pause = min(pause * 2, context.poll)


def _status(
    context_id: str, task_id: str, state: TaskState, text: str, **meta: object
) -> TaskStatusUpdateEvent:
    status = TaskStatus(state=state, message=agent_note(text, context_id, task_id))
    update = TaskStatusUpdateEvent(task_id=task_id, context_id=context_id, status=status)
    if meta:
        update.metadata.update(meta)
    return update


async def _updates(
    context: Context, session: str, context_id: str, turn: str, event: ServiceEvent
) -> AsyncIterator[Update]:
    """What one event of the turn says to an A2A client."""
    task_id = encode_task(context_id, turn)
    working = TaskState.TASK_STATE_WORKING
    data = event.data
    if event.kind == "turn_started":
        how = "resumed after a takeover" if data.get("resumed") else "started"
        yield _status(context_id, task_id, working, f"the turn {how}")
    elif event.kind == "steers_taken":
        ids = [str(i) for i in data.get("ids", [])]
        step = int(data.get("step", 0))
        text = f"steer {', '.join(ids)} taken at step {step}"
        yield _status(context_id, task_id, working, text, steers_taken=ids, step=step)
    elif event.kind == "stop":
        yield _status(context_id, task_id, working, "a stop was asked for")
    elif event.kind == "message":
        position = int(data.get("position", 0))
        page = await context.service.transcript(session, after=position - 1, limit=1)
        said = to_a2a(page[0].message, context_id, task_id) if page else None
        if said is not None:
            status = TaskStatus(state=working, message=said)
            yield TaskStatusUpdateEvent(task_id=task_id, context_id=context_id, status=status)
    elif event.kind == "turn_ended":
        view = await context.service.turn(session, turn)
        if view is not None and view.text:
            answer = Artifact(artifact_id=f"{turn}:answer", name="answer")
            answer.parts.append(Part(text=view.text))
            yield TaskArtifactUpdateEvent(
                task_id=task_id, context_id=context_id, artifact=answer, last_chunk=True
            )
        state = str(data.get("state", "failed"))
        released = [str(i) for i in data.get("released", [])]
        text = f"the turn ended: {state}"
        if released:
            text += f"; {', '.join(released)} not taken: each a task of its own"
        tasks = [encode_task(context_id, i) for i in released]  # each a task of its own
        yield _status(context_id, task_id, STATES[state], text, released=tasks)
