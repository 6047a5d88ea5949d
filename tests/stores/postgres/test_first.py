"""What the Postgres claim that makes a turn's first step (``claim(first=True)``) does beyond
the service contract's cases (steerable/testing/first_cases.py): it is one round trip, like
the claim alone; the prompt is stored byte for byte as the codec writes its unsteered
message; and a message a plain save committed after the claim's snapshot makes the claim
run again rather than fail."""

from __future__ import annotations

import asyncio
from typing import Any

from steerable import codec
from steerable.messages import new_id, user
from steerable.service_store import Claim, Input
from steerable.stores.postgres import PostgresStore
from tests.stores.postgres.support import create_pool, until_waiting_on_a_lock
from tests.stores.postgres.wire import Wire, no_reset


def _sid() -> str:
    return f"pg-first-{new_id()}"


async def _claim(store: PostgresStore, sid: str) -> Claim:
    claim = await store.claim("a", seconds=60, cap=16, session=sid, first=True)
    assert claim is not None
    return claim


async def test_a_first_claim_is_one_round_trip(wire: Wire, database: str) -> None:
    """The step rides in the claim's statement: one trip, with or without a steer taken."""
    pool = await create_pool(
        database, host="127.0.0.1", port=wire.port, min_size=1, max_size=1, reset=no_reset
    )
    try:
        store = PostgresStore(pool)
        counted = []
        for steered in (False, False, True):  # the first prepares the statement
            sid = _sid()
            await store.enqueue(sid, Input("send", "go", "t"))
            if steered:
                await store.enqueue(sid, Input("steer", "and", "s"))
            wire.sent.clear()
            claim = await _claim(store, sid)
            counted.append((wire.round_trips, wire.sent["P"]))
            assert claim.taken is not None and len(claim.taken) == int(steered)
        assert counted[1:] == [(1, 0), (1, 0)], counted
    finally:
        await pool.close()


async def test_the_prompt_is_stored_as_the_codec_writes_its_unsteered_message(
    pool: Any, store: PostgresStore
) -> None:
    """Byte for byte, for ASCII text and for text the codec writes unescaped (non-ASCII, a
    quote, a brace, a NUL); the steer after it keeps its steered body."""
    for text in ("go", "naïve 'quoted' {\"steered\":true,} \x00 ✓"):
        sid = _sid()
        prompt = Input("send", text, "t")
        await store.enqueue(sid, prompt)
        await store.enqueue(sid, Input("steer", text, "s"))
        await _claim(store, sid)
        bodies = await pool.fetch(
            "SELECT id, body FROM steerable_messages WHERE session = $1 ORDER BY position", sid
        )
        assert [(r["id"], r["body"]) for r in bodies] == [
            ("t", codec.encode(prompt.message(steered=False))),
            ("s", codec.encode(Input("steer", text, "s").message(steered=True))),
        ]


async def test_a_prompt_body_the_codec_did_not_write_still_loses_its_steered_key(
    pool: Any, store: PostgresStore
) -> None:
    """A body in another spelling of the same JSON (keys reordered, spaces) is stored
    through jsonb without the key: it decodes to the prompt's unsteered message."""
    sid = _sid()
    prompt = Input("send", "go", "t")
    await store.enqueue(sid, prompt)
    await pool.execute(
        "UPDATE steerable_inputs SET body = (body::jsonb)::text WHERE session = $1", sid
    )
    await _claim(store, sid)
    [stored] = await store.messages(sid)
    assert stored == prompt.message(steered=False)


async def test_a_steer_already_in_the_transcript_is_taken_not_recorded_again(
    store: PostgresStore,
) -> None:
    """The step's rule for a steer whose id is a stored message: taken and counted, named
    in ``steers_taken``, but neither stored again nor in ``Claim.taken``."""
    sid = _sid()
    await store.save(sid, [user("already", id="s")], at=0)
    await store.enqueue(sid, Input("send", "go", "t"))
    await store.enqueue(sid, Input("steer", "again", "s"))
    await store.enqueue(sid, Input("steer", "new", "s2"))
    claim = await _claim(store, sid)
    assert [m.id for m in claim.taken or []] == ["s2"]
    assert (claim.start, claim.steps, claim.steers_taken) == (1, 1, 2)
    assert [m.id for m in await store.messages(sid)] == ["s", "t", "s2"]
    taken = await store.input(sid, "s")
    assert taken is not None and (taken.state, taken.step) == ("taken", 1)
    events = await store.events(sid, after=0, limit=100)
    kinds = [e.kind for e in events]
    tail = events[kinds.index("turn_started") + 1 :]
    assert [(e.kind, e.data) for e in tail] == [
        ("message", {"position": 1, "id": "t", "role": "user", "steered": False}),
        ("steers_taken", {"ids": ["s", "s2"], "step": 1}),
        ("message", {"position": 2, "id": "s2", "role": "user", "steered": True}),
        ("step", {"step": 1, "length": 3}),
    ]


async def test_a_message_saved_after_the_claim_s_snapshot_makes_it_run_again(
    pool: Any, store: PostgresStore
) -> None:
    """A message inserted by another transaction at the position the first step writes: the
    claim waits on its key, fails whole when it commits, and runs again after it."""
    sid = _sid()
    await store.enqueue(sid, Input("send", "go", "t"))
    await store.enqueue(sid, Input("steer", "and", "s"))
    before = user("before")
    async with pool.acquire() as other:
        save = other.transaction()
        await save.start()
        await other.execute(
            "INSERT INTO steerable_messages (session, position, id, body) VALUES ($1, 0, $2, $3)",
            sid,
            before.id,
            codec.encode(before),
        )
        claiming = asyncio.create_task(_claim(store, sid))
        await until_waiting_on_a_lock(pool, "the claim")
        await save.commit()
        claim = await claiming
    assert (claim.start, [m.id for m in claim.messages]) == (1, [before.id])
    assert [m.id for m in claim.taken or []] == ["s"] and claim.lease.epoch == 1
    assert [m.id for m in await store.messages(sid)] == [before.id, "t", "s"]
    events = await store.events(sid, after=0, limit=100)
    assert [e.id for e in events] == list(range(1, len(events) + 1))
