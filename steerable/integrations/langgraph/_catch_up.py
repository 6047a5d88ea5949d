"""What a run's graph state lacks of the stored transcript, at the run's step.

The stored transcript is the truth; the graph's state is what LangGraph kept (its
checkpoint, or only the input when there is no checkpointer). At each step
:class:`~steerable.integrations.langgraph.SteeringMiddleware` asks :func:`behind` what the
store holds that the state does not, and puts it into the state (through ``add_messages``:
a ``RemoveMessage`` for each id to drop, then the stored messages under their ids).
"""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage

from steerable.integrations.langgraph._records import (
    FRAMEWORK,
    from_stored,
    rebuilt_ids,
    stored_ids,
)
from steerable.messages import Message

__all__ = ["behind"]


def behind(
    stored: Sequence[Message], messages: Sequence[AnyMessage]
) -> tuple[list[str], list[Message]]:
    """What the graph's state lacks of the store: (ids to drop from it, stored messages).

    The anchor is the state's last message that is stored. What the store has after it
    was stored by a step the state never saw: a crash lost that step's checkpoint. If it
    is only steers (the process died between a take and the checkpoint), they are given
    back. If it is more (the graph ran the step again, so its replies and tool results
    have new ids), the store wins: the state's messages after the anchor are dropped and
    the stored ones put in their place.

    A state with none of the stored messages is a new run on the session (LangGraph's
    state without a checkpointer is only the input), unless it is a retry:
    see :func:`_retried`.
    """
    ids = stored_ids(stored)
    anchor = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].id in ids), -1)
    if anchor < 0:
        return _retried(stored, messages)
    at = next(i for i, m in enumerate(stored) if messages[anchor].id in rebuilt_ids(m))
    tail = list(stored[at + 1 :])
    in_state = {m.id for m in messages}
    if all(m.steered for m in tail):
        return [], [m for m in tail if m.id not in in_state]
    dropped = [m.id for m in messages[anchor + 1 :] if m.id is not None]
    return dropped, tail


def _retried(
    stored: Sequence[Message], messages: Sequence[AnyMessage]
) -> tuple[list[str], list[Message]]:
    """A retry of the stored turn that did not finish: the state in its place, else nothing.

    Without a checkpointer (or with one that lost the thread) a retry after a crash is the
    same input again, and LangGraph gives a prompt without an id a new random one, so no
    id ties it to the stored turn. It is that turn's retry when the stored transcript's
    last prompt (a user input, not a steer) has no final answer after it, and the run's
    input is the same messages (type and content) as those stored up to that prompt. Then
    the input is dropped and the stored turn from its first input on is the state: the
    retry sees the steers taken once, in place, and goes on from the last stored step.
    Anything else (a finished turn, another prompt) is a new turn, appended.
    """
    prompt = _last_prompt(stored)
    if prompt is None or not messages or _answered(stored[prompt + 1 :]):
        return [], []
    start, rebuilt = prompt + 1, 0
    while start > 0 and rebuilt < len(messages):  # the stored messages the input would be
        start -= 1
        rebuilt += len(rebuilt_ids(stored[start]))
    if rebuilt != len(messages):
        return [], []
    if [_content(m) for m in from_stored(stored[start : prompt + 1])] != [
        _content(m) for m in messages
    ]:
        return [], []
    return [m.id for m in messages if m.id is not None], list(stored[start:])


def _last_prompt(stored: Sequence[Message]) -> int | None:
    """The position of the last user input of ``stored`` that is not a steer."""
    for index in range(len(stored) - 1, -1, -1):
        message = stored[index]
        if (
            message.role == "user"
            and not message.steered
            and not message.natives(FRAMEWORK)
            and not message.tool_results
        ):
            return index
    return None


def _answered(tail: Sequence[Message]) -> bool:
    """Whether ``tail`` holds a final answer (a reply with no tool call)."""
    return any(
        isinstance(m, AIMessage) and not m.tool_calls
        for m in from_stored(t for t in tail if t.role == "assistant")
    )


def _content(message: BaseMessage) -> tuple[str, object]:
    # what a retry repeats: the kind and the content (LangGraph makes new ids)
    kind = "human" if isinstance(message, HumanMessage) else message.type
    return kind, message.content
