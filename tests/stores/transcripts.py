"""Transcripts the stores' own race tests start from."""

from __future__ import annotations

from steerable.messages import Message, assistant, user
from steerable.store import Store


async def five(store: Store, sid: str) -> list[Message]:
    """Save five messages (user, assistant, ...) to the new session ``sid``; them."""
    messages = [user("one"), assistant("two"), user("three"), assistant("four"), user("five")]
    await store.save(sid, messages, at=0)
    return messages
