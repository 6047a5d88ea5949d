"""What a run's graph state lacks of the stored transcript, at the run's step.

The stored transcript is the truth; the graph's state is what LangGraph kept (its
checkpoint, or only the input when there is no checkpointer). At each step
:class:`~steerable.integrations.langgraph.SteeringMiddleware` asks :func:`behind` what the
store holds that the state does not, and puts it into the state (through ``add_messages``:
a ``RemoveMessage`` for each id to drop, then the stored messages under their ids).
"""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.messages import AnyMessage

from steerable.integrations.langgraph._records import (
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
    the stored ones put in their place. A state with none of the stored messages (a
    fresh thread) gets nothing.
    """
    ids = stored_ids(stored)
    anchor = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].id in ids), -1)
    if anchor < 0:
        return [], []
    at = next(i for i, m in enumerate(stored) if messages[anchor].id in rebuilt_ids(m))
    tail = list(stored[at + 1 :])
    in_state = {m.id for m in messages}
    if all(m.steered for m in tail):
        return [], [m for m in tail if m.id not in in_state]
    dropped = [m.id for m in messages[anchor + 1 :] if m.id is not None]
    return dropped, tail
