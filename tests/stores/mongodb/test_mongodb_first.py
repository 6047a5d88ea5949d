"""What the MongoDB store promises beyond the service contract about a claim that makes the
turn's first step (``claim(first=True)``): the commands it sends (the claim's, and of the
step's only what the claim has not done already), a prompt whose id a chunk holds (the
claim made again without the step), a prompt big enough for a blob and a flush, and the
turn's count of offered steers, the same as a claim without the step counts."""

from __future__ import annotations

from typing import Any

import pytest
from pymongo.asynchronous.database import AsyncDatabase

from steerable.messages import assistant, user
from steerable.service_store import Input
from steerable.stores.mongodb import MongoStore
from steerable.stores.mongodb import _layout as layout
from tests.stores.mongodb.test_mongodb_queue import (
    APPEND,
    HEAD,
    LOCK,
    OFFERED,
    _recorded,
    db,
)

__all__ = ["db"]  # the fixture
pytestmark = pytest.mark.usefixtures("mongo_server")

QUEUED = "find:steerable_inputs"  # the head of the queue (a find sorted by seq)
PROMPT = "update:steerable_inputs"
TAKEN = "update:steerable_inputs"
COUNT = "aggregate:steerable_inputs"  # count_documents
IDS = "find:steerable_sessions"  # the chunks' id lists, for the steers offered
STARTED = ["insert:steerable_turns", "update:steerable_service", "insert:steerable_events"]


async def test_a_first_claim_sends_the_claims_commands_and_the_steps_writes(
    db: AsyncDatabase[Any],
) -> None:
    """No steer offered: the claim's commands, with the append (and the tail's ids read
    with the length): one command and no commit more than the claim alone, where a step
    after it sends eight. Steers offered: their read (instead of the claim's count), the
    id lists, the append, their update."""
    async with _recorded(db) as (store, sent):
        await store.enqueue("plain", Input("send", "go", "t"))
        with sent.recording() as commands:
            claim = await store.claim("a", seconds=60, cap=16, session="plain")
        assert claim is not None and claim.taken is None
        alone = [LOCK, QUEUED, PROMPT, HEAD, *STARTED, "commitTransaction", HEAD]
        assert commands == alone, commands
        await store.enqueue("first", Input("send", "go", "t"))
        with sent.recording() as commands:
            claim = await store.claim("a", seconds=60, cap=16, session="first", first=True)
        assert claim is not None and claim.taken == []
        assert commands == [LOCK, QUEUED, PROMPT, HEAD, APPEND, *STARTED, "commitTransaction", HEAD]
        for sid in ("offered", "counted"):
            await store.enqueue(sid, Input("send", "go", "t"))
            await store.enqueue(sid, Input("steer", "and", "s"))
        with sent.recording() as commands:
            claim = await store.claim("a", seconds=60, cap=16, session="counted")
        assert claim is not None
        assert commands == [LOCK, QUEUED, PROMPT, HEAD, COUNT, *STARTED, "commitTransaction", HEAD]
        with sent.recording() as commands:
            claim = await store.claim("a", seconds=60, cap=16, session="offered", first=True)
        assert claim is not None and [m.id for m in claim.taken or []] == ["s"]
        took = [OFFERED, IDS, APPEND, TAKEN]
        assert commands == [LOCK, QUEUED, PROMPT, HEAD, *took, *STARTED, "commitTransaction", HEAD]


async def test_a_prompt_whose_id_a_chunk_holds_is_claimed_without_the_step(
    db: AsyncDatabase[Any],
) -> None:
    """The unique index refuses the append and the transaction with it; the claim is made
    again without the step: one turn, one epoch, nothing of the refused round kept."""
    store = MongoStore(db)
    big = "x" * layout.FLUSH_BYTES  # tips the tail into a chunk
    await store.save("c", [user("stored", id="t"), assistant(big, id="big")], at=0)
    head = await db[layout.SESSIONS].find_one({"_id": "c"})
    assert head is not None and head["base"] == 2, "the prompt's id is not in a chunk"
    await store.enqueue("c", Input("send", "go", "t"))
    await store.enqueue("c", Input("steer", "and", "s"))
    claim = await store.claim("a", seconds=60, cap=16, session="c", first=True)
    assert claim is not None and claim.taken is None
    assert (claim.lease.epoch, claim.steps, claim.steers_taken, claim.start) == (1, 0, 0, 2)
    assert [m.id for m in claim.messages] == ["t", "big"]
    assert [m.id for m in await store.messages("c")] == ["t", "big"]
    waiting = await store.input("c", "s")
    assert waiting is not None and waiting.state == "waiting"
    kinds = [e.kind for e in await store.events("c", after=0, limit=100)]
    assert kinds.count("turn_started") == 1 and "step" not in kinds
    turn = await db[layout.TURNS].find_one({"s": "c"})
    assert turn is not None and (turn["steps"], turn["tk"], turn["of"]) == (0, 0, 1)
    assert await db[layout.BLOBS].count_documents({"s": "c"}) == 0


async def test_a_big_prompt_goes_to_a_blob_and_the_head_is_flushed(
    db: AsyncDatabase[Any],
) -> None:
    """A prompt over the inline limit is stored as a blob in the claim's transaction, and
    the tail it made big is flushed to a chunk after the commit, as a step's is."""
    store = MongoStore(db)
    text = "y" * (layout.INLINE_MAX + 10)
    await store.enqueue("b", Input("send", text, "t"))
    await store.enqueue("b", Input("steer", "and", "s"))
    claim = await store.claim("a", seconds=60, cap=16, session="b", first=True)
    assert claim is not None and claim.messages == [] and claim.start == 0
    assert [m.id for m in claim.taken or []] == ["s"]
    stored = await store.messages("b")
    assert stored[0] == claim.prompt.message(steered=False) and stored[0].text == text
    assert stored[1:] == claim.taken
    assert await db[layout.BLOBS].count_documents({"s": "b"}) == 1
    text = "z" * (layout.FLUSH_BYTES + 10)  # inline, but over the flush threshold
    await store.enqueue("f", Input("send", text, "t"))
    claim = await store.claim("a", seconds=60, cap=16, session="f", first=True)
    assert claim is not None and claim.taken == []
    head = await db[layout.SESSIONS].find_one({"_id": "f"})
    assert head is not None and (head["base"], head["tail"], head["mv"]) == (1, [], 0)
    assert [m.text for m in await store.messages("f")] == [text]


async def test_a_first_claim_counts_the_offered_steers_as_a_claim_does(
    db: AsyncDatabase[Any],
) -> None:
    """The turn's ``of`` (steers offered: what later offers are capped by) is the same with
    the step as without it, whatever the cap: under it, at it, above it, 0."""
    store = MongoStore(db)
    for cap in (0, 1, 3, 5):
        counts = []
        for first in (False, True):
            sid = f"of-{cap}-{first}"
            await store.enqueue(sid, Input("send", "go", "t"))
            for n in range(3):
                await store.enqueue(sid, Input("steer", f"s{n}", f"s{n}"))
            claim = await store.claim("a", seconds=60, cap=cap, session=sid, first=first)
            assert claim is not None
            turn = await db[layout.TURNS].find_one({"s": sid})
            assert turn is not None
            counts.append(turn["of"])
            if first:
                assert claim.steers_taken == min(cap, 3) == turn["tk"]
        assert counts == [3, 3], f"cap {cap}"
