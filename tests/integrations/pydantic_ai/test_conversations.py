"""SteerableConversationStore: Pydantic AI's ConversationStore over a steerable store."""

from __future__ import annotations

import pytest
from pydantic_ai import Agent
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import ConversationConflict

from steerable import Session, Store, StoreError, UsageError
from steerable.integrations.pydantic_ai import SteerableConversationStore, Steering
from steerable.stores.memory import MemoryStore
from tests.integrations.pydantic_ai.support import Script, say, view


async def test_saves_grow_the_transcript_and_load_back_with_revisions_and_usage() -> None:
    backend = MemoryStore()
    store = SteerableConversationStore(backend)
    script = Script(say("one"), say("two"))
    agent = Agent(script.model)
    assert await store.load("c") is None
    first = await agent.run("hi", conversation=Conversation(conversation_id="c"))
    entries = await store.save(first)
    assert [e.id for e in entries] == ["0@c", "1@c"]
    loaded = await store.load("c")
    assert loaded is not None and loaded.revision == first.conversation.revision
    assert loaded.usage.requests == 1
    second = await agent.run("again", conversation=loaded)
    await store.save(second)
    assert script.views()[-1] == ["user:hi", "say:one", "user:again"]
    assert [e.id for e in await store.load_entries("c") or []] == ["0@c", "1@c", "2@c", "3@c"]
    # a stale copy is a conflict, not a silent overwrite
    with pytest.raises(ConversationConflict):
        await store.save(first)
    # the same transcript steering runs on
    steering = await Steering.load(Session("c", backend))
    assert view(steering.history) == ["user:hi", "say:one", "user:again", "say:two"]


async def test_what_a_transcript_cannot_hold_is_refused() -> None:
    store = SteerableConversationStore(MemoryStore())
    agent = Agent(Script(say("one")).model)
    await store.save(await agent.run("hi", conversation=Conversation(conversation_id="c")))
    loaded = await store.load("c")
    assert loaded is not None
    with pytest.raises(UsageError, match="cannot hold branches"):
        await store.branch("c", at=1, expected_revision=loaded.revision)
    with pytest.raises(UsageError, match="list"):
        await store.list_conversations()
    with pytest.raises(UsageError, match="scope"):
        await store.save(Conversation(conversation_id="d"), scope="team")


async def test_an_unknown_entry_is_a_store_error_and_a_key_error() -> None:
    store = SteerableConversationStore(MemoryStore())
    agent = Agent(Script(say("one")).model)
    await store.save(await agent.run("hi", conversation=Conversation(conversation_id="c")))
    assert (await store.read_entry("1@c")).id == "1@c"
    for entry in ("2@c", "not an entry"):
        with pytest.raises(StoreError) as raised:
            await store.read_entry(entry)
        assert isinstance(raised.value, KeyError) and "entry" in str(raised.value)


async def test_delete_forgets_the_session_whole_and_a_stale_revision_is_a_conflict(
    store: Store,
) -> None:
    conversations = SteerableConversationStore(store)
    agent = Agent(Script(say("one"), say("two")).model)
    await conversations.save(await agent.run("hi", conversation=Conversation(conversation_id="c")))
    stale = await conversations.read_record("c")
    assert stale is not None
    loaded = await conversations.load("c")
    assert loaded is not None
    await conversations.save(await agent.run("again", conversation=loaded))
    with pytest.raises(ConversationConflict):  # saved since that record was read
        await conversations.delete_record("c", expected_revision=stale.revision)
    assert len(await Session("c", store).messages()) == 4
    await Session("c", store).steer("waiting", id="w")
    await conversations.delete("c")  # Pydantic AI's delete: read the record, delete at it
    assert await conversations.load("c") is None
    assert await Session("c", store).messages() == [] and await Session("c", store).steers() == []
    await conversations.delete("c")  # nothing to delete: nothing happens
