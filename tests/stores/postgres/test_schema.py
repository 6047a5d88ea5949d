"""What the Postgres store's migrations do beyond every server store's (those:
tests/stores/test_server_migrations.py): column types, a failing step, the old script."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest

from steerable import codec
from steerable.errors import StoreUnavailable, UsageError
from steerable.messages import ToolResult, assistant, user
from steerable.service_store import Input, Lease
from steerable.store import Steer
from steerable.stores.migrations import Migration
from steerable.stores.postgres import MIGRATIONS, SCHEMA_VERSION, PostgresStore, migrate


async def test_the_tables_keep_no_json(empty_schema: Any) -> None:
    # jsonb would rewrite a body (key order, duplicate keys, spacing)
    await migrate(empty_schema)
    types = await empty_schema.fetch(
        "SELECT DISTINCT data_type FROM information_schema.columns"
        " WHERE table_name LIKE 'steerable\\_%' AND table_schema = current_schema()"
    )
    assert {t[0] for t in types} == {
        "text",
        "bigint",
        "boolean",
        "integer",
        "timestamp with time zone",
    }


async def test_a_step_that_fails_is_not_recorded_and_leaves_nothing(
    empty_schema: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    await migrate(empty_schema)
    broken = Migration(
        SCHEMA_VERSION + 1,
        "broken",
        ("CREATE TABLE steerable_half (id text)", "SELECT * FROM no_such_table"),
    )
    monkeypatch.setattr("steerable.stores.postgres._migrate.MIGRATIONS", (*MIGRATIONS, broken))
    with pytest.raises(StoreUnavailable, match="apply the steerable migrations"):
        await migrate(empty_schema)
    assert await PostgresStore(empty_schema).schema_version() == SCHEMA_VERSION
    assert await empty_schema.fetchval("SELECT to_regclass('steerable_half')") is None


async def test_a_database_of_the_old_schema_script_is_at_version_1(empty_schema: Any) -> None:
    # Releases before the migrations shipped one idempotent script that recorded version 1.
    await empty_schema.execute(
        "CREATE TABLE steerable_schema (version integer PRIMARY KEY,"
        " applied_at timestamptz NOT NULL DEFAULT now());"
        + ";".join(MIGRATIONS[0].steps)
        + "; INSERT INTO steerable_schema (version) VALUES (1)"
    )
    assert await migrate(empty_schema) == [m.version for m in MIGRATIONS[1:]]
    await PostgresStore(empty_schema).check_schema()


async def test_a_database_at_version_1_keeps_its_data_through_the_service_tables_step(
    empty_schema: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as earlier:  # the release before the service
        for module in ("_store", "_migrate"):
            earlier.setattr(f"steerable.stores.postgres.{module}.MIGRATIONS", MIGRATIONS[:1])
        assert await migrate(empty_schema) == [1]
        old = PostgresStore(empty_schema)
        await old.save("s", [user("kept"), assistant("too")], at=0)
        await old.steer("s", Steer("still waiting", "w"))
    assert await migrate(empty_schema) == [2, 3, 4, 5, 6, 7]
    store = PostgresStore(empty_schema)
    assert [m.text for m in await store.messages("s")] == ["kept", "too"]
    assert [(s.id, s.text) for s in await store.steers("s")] == [("w", "still waiting")]
    await store.enqueue("s", Input("send", "go", "t"))
    claim = await store.claim("a", seconds=60, cap=16, session="s")
    assert claim is not None and (claim.start, len(claim.messages)) == (2, 2)
    await store.step(claim.lease, [claim.prompt.message(steered=False)], at=2, take=0)
    assert [m.text for m in await store.messages("s")] == ["kept", "too", "go"]


async def _old_send(pool: Any, session: str, id: str, at: str) -> None:
    """A send while no turn runs, written as the statement of versions 2 and 3 wrote it
    (whose columns this steerable's statements no longer fit), its event at ``at``."""
    await pool.execute(
        "INSERT INTO steerable_sessions (session) VALUES ($1) ON CONFLICT DO NOTHING", session
    )
    seq, event, queued = await pool.fetchrow(
        "UPDATE steerable_sessions SET version = version + 1, inputs = inputs + 1,"
        " events = events + 1, queued = queued + 1 WHERE session = $1"
        " RETURNING inputs, events, queued",
        session,
    )
    body = codec.encode(Input("send", f"text of {id}", id).message(steered=True))
    await pool.execute(
        "INSERT INTO steerable_inputs (session, seq, id, kind, body, ahead)"
        " VALUES ($1, $2, $3, 'send', $4, $5)",
        session,
        seq,
        id,
        body,
        queued - 1,
    )
    data = json.dumps({"id": id, "kind": "send", "turn": None})
    await _old_event(pool, session, event, "input", None, data, at)


async def _old_event(
    pool: Any, session: str, id: int, kind: str, turn: str | None, data: str, at: str
) -> None:
    await pool.execute(
        "INSERT INTO steerable_events (session, id, kind, turn, data, at)"
        " VALUES ($1, $2, $3, $4, $5, $6::text::timestamptz)",
        session,
        id,
        kind,
        turn,
        data,
        at,
    )


async def _old_turn(pool: Any, session: str, id: str, started: str, ended: str) -> None:
    """The claim and the end of the turn of the queue's head, as version 3 wrote them, with
    the prompt saved in between; the events at ``started`` and ``ended``."""
    await pool.execute(
        "UPDATE steerable_inputs SET state = 'prompt', turn = id WHERE session = $1 AND id = $2",
        session,
        id,
    )
    epoch, events = await pool.fetchrow(
        "UPDATE steerable_sessions SET version = version + 1, epoch = epoch + 1,"
        " queued = queued - 1, events = events + 2 WHERE session = $1 RETURNING epoch, events",
        session,
    )
    start = await pool.fetchval(
        "SELECT count(*) FROM steerable_messages WHERE session = $1", session
    )
    await pool.execute(
        "INSERT INTO steerable_messages (session, position, id, body) VALUES ($1, $2, $3, $4)",
        session,
        start,
        id,
        codec.encode(user(f"text of {id}", id=id)),
    )
    await pool.execute(
        "INSERT INTO steerable_turns (session, id, began, start_position, cap, state, epoch,"
        " steps, end_position, answer) VALUES ($1, $2, $3, $4, 16, 'completed', $3, 1, $5,"
        " '\"done\"')",
        session,
        id,
        epoch,
        start,
        start + 1,
    )
    started_data = json.dumps({"epoch": epoch, "holder": "a", "resumed": False})
    await _old_event(pool, session, events - 1, "turn_started", id, started_data, started)
    await _old_event(pool, session, events, "turn_ended", id, '{"state": "completed"}', ended)


async def _old_claim(pool: Any, session: str, id: str, holder: str) -> Lease:
    """The claim of the queue's head ``id`` as versions 4 and 5 wrote it (their statement
    reads no trace), its turn starting after the transcript; the holder's lease."""
    await pool.execute(
        "UPDATE steerable_inputs SET state = 'prompt', turn = id WHERE session = $1 AND id = $2",
        session,
        id,
    )
    epoch, expires, seq, start = await pool.fetchrow(
        "UPDATE steerable_sessions SET version = version + 1, epoch = epoch + 1, holder = $2,"
        " expires = now() + interval '60 seconds', running = $3, queued = queued - 1"
        " WHERE session = $1 RETURNING epoch, extract(epoch FROM expires)::float8,"
        " (SELECT seq FROM steerable_inputs WHERE session = $1 AND id = $3),"
        " (SELECT count(*) FROM steerable_messages WHERE session = $1)",
        session,
        holder,
        id,
    )
    await pool.execute(
        "INSERT INTO steerable_turns (session, id, began, start_position, cap, state, epoch,"
        " seq, started_at) VALUES ($1, $2, $3, $4, 16, 'running', $3, $5, now())",
        session,
        id,
        epoch,
        start,
        seq,
    )
    return Lease(session, holder, epoch, expires)


async def _migrated_to(pool: Any, monkeypatch: pytest.MonkeyPatch, version: int) -> None:
    with monkeypatch.context() as earlier:  # the release at `version`
        for module in ("_store", "_migrate"):
            earlier.setattr(f"steerable.stores.postgres.{module}.MIGRATIONS", MIGRATIONS[:version])
        assert await migrate(pool) == list(range(1, version + 1))


async def test_a_database_at_version_2_lists_its_sessions_after_the_listing_step(
    empty_schema: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _migrated_to(empty_schema, monkeypatch, 2)
    for name in ("b", "a", "\u00e9"):
        await _old_send(empty_schema, name, "go", "2020-01-01T00:00:00Z")
    assert await migrate(empty_schema) == [3, 4, 5, 6, 7]
    listed = await PostgresStore(empty_schema).sessions(prefix="", after=None, limit=10)
    assert [(s.session, s.state) for s in listed] == [
        ("a", "queued"),
        ("b", "queued"),
        ("\u00e9", "queued"),
    ]


_T1, _T2, _T3, _T4 = (f"2020-01-01T00:00:0{n}Z" for n in range(1, 5))


def _epoch(at: str) -> float:
    return datetime.fromisoformat(at).timestamp()


async def test_a_database_at_version_3_keeps_its_rows_and_gains_their_times(
    empty_schema: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The times of the inputs and turns written before step 4 are those of their events;
    # the messages' are unknown (None); a waiting input of then can be cancelled now.
    await _migrated_to(empty_schema, monkeypatch, 3)
    await _old_send(empty_schema, "s", "a", _T1)
    await _old_turn(empty_schema, "s", "a", _T2, _T3)
    await _old_send(empty_schema, "s", "b", _T4)
    await _old_send(empty_schema, "s", "c", _T4)
    assert await migrate(empty_schema) == [4, 5, 6, 7]
    store = PostgresStore(empty_schema)
    await store.check_schema()
    a = await store.input("s", "a")
    assert a is not None and (a.state, a.at, a.metadata, a.trace) == ("prompt", _epoch(_T1), {}, {})
    [turn] = await store.turns("s", after=0, limit=10)
    assert (turn.id, turn.state, turn.seq, turn.text) == ("a", "completed", 1, "done")
    assert (turn.started_at, turn.ended_at) == (_epoch(_T2), _epoch(_T3))
    assert [e.at for e in await store.transcript("s", after=-1, limit=10)] == [None]
    status = await store.status("s")
    assert (status.turn, status.queued, status.waiting_total, status.metadata) == (None, 2, 2, {})
    assert [(i.id, i.at) for i in status.waiting] == [("b", _epoch(_T4)), ("c", _epoch(_T4))]
    cancelled = await store.cancel("s", "b")
    assert cancelled is not None and cancelled.state == "cancelled"
    claim = await store.claim("a", seconds=60, cap=16, session="s")
    assert claim is not None and (claim.turn, claim.start) == ("c", 1)
    await store.step(claim.lease, [claim.prompt.message(steered=False)], at=1, take=0)
    turns = await store.turns("s", after=0, limit=10)
    assert [(t.id, t.seq) for t in turns] == [("a", 1), ("c", 3)]
    assert turns[1].started_at is not None and turns[1].started_at > _epoch(_T4)
    entries = await store.transcript("s", after=-1, limit=10)
    assert entries[0].at is None and entries[1].at is not None


async def test_a_database_at_version_4_is_refused_until_the_journal_step_then_keeps_it_all(
    empty_schema: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Step 5 adds the journal's table and nothing else: a store of this steerable refuses
    # a database without it (naming the step), and after it the rows of version 4 are
    # all there, a running turn goes on, and its tools can be journaled.
    await _migrated_to(empty_schema, monkeypatch, 4)
    with monkeypatch.context() as earlier:  # the release at version 4 writes a session
        earlier.setattr("steerable.stores.postgres._store.MIGRATIONS", MIGRATIONS[:4])
        await PostgresStore(empty_schema).save("s", [user("kept")], at=0)
    await _old_send(empty_schema, "s", "t", _T1)
    lease = await _old_claim(empty_schema, "s", "t", "a")
    with pytest.raises(StoreUnavailable, match=r"version 4.*step 5 \(the tool journal"):
        await PostgresStore(empty_schema).check_schema()
    assert await migrate(empty_schema) == [5, 6, 7]
    store = PostgresStore(empty_schema)
    await store.check_schema()
    assert await store.begin_calls("s", ["k"]) == {}
    result = ToolResult("c", "pay", "paid", False)
    assert await store.end_call("s", "k", result) == result
    await store.step(lease, [user("text of t", id="t")], at=1, take=0)
    assert [m.text for m in await store.messages("s")] == ["kept", "text of t"]
    assert await store.begin_calls("s", ["k"]) == {"k": result}
    view = await store.input("s", "t")
    assert view is not None and (view.state, view.trace) == ("prompt", {})


async def test_an_input_state_outside_the_contract_is_refused_by_the_table(
    empty_schema: Any,
) -> None:
    await migrate(empty_schema)
    await PostgresStore(empty_schema).enqueue("s", Input("send", "go", "t"))
    with pytest.raises(asyncpg.CheckViolationError, match="steerable_inputs_state"):
        await empty_schema.execute("UPDATE steerable_inputs SET state = 'lost' WHERE session = 's'")


def test_the_store_takes_a_pool_not_a_dsn() -> None:
    with pytest.raises(UsageError, match="asyncpg pool"):
        PostgresStore("postgresql://localhost/db")  # type: ignore[arg-type]
