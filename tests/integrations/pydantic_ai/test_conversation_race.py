"""Two writers of SteerableConversationStore.write_record with the same expected revision at
once, each through a store object of its own on one SQLite file or one Postgres database:
exactly one wins, the other gets Pydantic AI's conflict, nothing is stored twice."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from pydantic_ai import Agent
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import ConversationConflict, ConversationEntry
from pydantic_ai.messages import ModelRequest, UserPromptPart

from steerable import Store, transcript_problems
from steerable.integrations.pydantic_ai import SteerableConversationStore, history
from steerable.messages import Message
from steerable.store import Steer
from steerable.stores.url import open_url
from tests.integrations.pydantic_ai.support import Script, say, view


class Gated:
    """A store that, once armed, holds each transcript read until both writers have read:
    both then check the same revision before either appends (the race, every time)."""

    def __init__(self, inner: Store, barrier: asyncio.Barrier) -> None:
        self.inner = inner
        self.barrier = barrier
        self.armed = False

    async def messages(self, session: str) -> list[Message]:
        """The inner store's transcript, read before the barrier."""
        found = await self.inner.messages(session)
        if self.armed:
            self.armed = False
            await self.barrier.wait()
        return found

    async def save(
        self, session: str, messages: Sequence[Message], *, at: int, take: int = 0
    ) -> list[Message]:
        """The inner store's atomic append."""
        return await self.inner.save(session, messages, at=at, take=take)

    async def steer(self, session: str, steer: Steer) -> None:
        """The inner store's."""
        await self.inner.steer(session, steer)

    async def take_steers(self, session: str, *, at: int | None, limit: int) -> list[Message]:
        """The inner store's."""
        return await self.inner.take_steers(session, at=at, limit=limit)

    async def steers(self, session: str) -> list[Steer]:
        """The inner store's."""
        return await self.inner.steers(session)


async def _race(first: Store, second: Store) -> None:
    barrier = asyncio.Barrier(2)
    gates = [Gated(first, barrier), Gated(second, barrier)]
    writers = [SteerableConversationStore(gate) for gate in gates]
    agent = Agent(Script(say("one")).model)
    await writers[0].save(await agent.run("hi", conversation=Conversation(conversation_id="c")))
    records = [await w.read_record("c") for w in writers]
    assert records[0] is not None and records[1] is not None
    revision = records[0].revision
    assert records[1].revision == revision

    async def write(n: int) -> None:
        record = records[n]
        assert record is not None
        entry = ConversationEntry(
            parent_id=record.head_id, message=ModelRequest(parts=[UserPromptPart(f"from {n}")])
        )
        gates[n].armed = True
        await writers[n].write_record(record, new_entries=[entry], expected_revision=revision)

    outcomes = await asyncio.gather(write(0), write(1), return_exceptions=True)
    assert sorted(type(o).__name__ for o in outcomes) == ["ConversationConflict", "NoneType"]
    winner = outcomes.index(None)
    assert isinstance(outcomes[1 - winner], ConversationConflict)
    stored = await first.messages("c")
    assert view(history(stored)) == ["user:hi", "say:one", f"user:from {winner}"]  # once
    assert await second.messages("c") == stored
    assert transcript_problems(stored) == []
    # the loser reloads and writes on the winner's revision
    fresh = await writers[1 - winner].load("c")
    assert fresh is not None and fresh.revision == records[winner].revision  # type: ignore[union-attr]


@contextlib.asynccontextmanager
async def _two(url: str) -> AsyncIterator[tuple[Store, Store]]:
    async with open_url(url) as first, open_url(url) as second:
        yield first, second


async def test_two_writers_on_one_sqlite_file(tmp_path: Path) -> None:
    async with _two(f"sqlite:///{tmp_path / 'c.db'}") as (first, second):
        await _race(first, second)


@pytest.mark.slow
async def test_two_writers_on_one_postgres_database(postgres_url: str) -> None:
    async with _two(postgres_url) as (first, second):
        await _race(first, second)
