"""What the MySQL store's service tables do beyond the service contract: the upgrades from
schemas 1 and 2, fencing by epoch alone refused whole (seen in the rows), the claim index, and
times that do not depend on a connection's time zone."""

from __future__ import annotations

import json
import warnings
from typing import Any

import pytest

from steerable import codec
from steerable.errors import Fenced, StoreUnavailable
from steerable.messages import Message, ToolCall, assistant, user
from steerable.service_store import Input, Lease, Outcome
from steerable.store import Steer
from steerable.stores.mysql import MIGRATIONS, MySQLStore, _service, migrate
from steerable.stores.mysql._driver import text_of
from tests.stores.mysql import server

# the procedures of a database at the latest schema: step 7's beside steps 1 and 2's, which a
# steerable of before that is still running calls
_PROCEDURES = ["steerable_save_v1", "steerable_save_v2", "steerable_step_v1", "steerable_step_v2"]


async def _rows(session: str) -> tuple[int, ...]:
    """How many rows the session has in each table the service writes."""
    counts = []
    for table in ("messages", "inputs", "turns", "events"):
        rows = await server.query(
            f"SELECT count(*) FROM steerable_{table} WHERE session = %s", (session,)
        )
        counts.append(int(rows[0][0]))
    return tuple(counts)


async def _claimable(session: str) -> Any:
    rows = await server.query(
        "SELECT claimable, expires FROM steerable_service WHERE session = %s", (session,)
    )
    return rows[0]


async def test_a_database_of_schema_1_upgrades_keeping_its_data(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with server.scratch_database() as pool:
        monkeypatch.setattr("steerable.stores.mysql._migrate.MIGRATIONS", MIGRATIONS[:1])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert await migrate(pool) == [1]
        monkeypatch.setattr("steerable.stores.mysql._store.MIGRATIONS", MIGRATIONS[:1])
        monkeypatch.setattr("steerable.stores.mysql._store.SAVE", "steerable_save_v1")
        old = MySQLStore(pool)
        await old.save("s", [user("kept", id="k")], at=0)
        await old.steer("s", Steer("waits", "w"))
        monkeypatch.undo()
        assert await migrate(pool) == [2, 3, 4, 5, 6, 7]
        store = MySQLStore(pool)
        assert [m.text for m in await store.messages("s")] == ["kept"]
        assert [s.id for s in await store.steers("s")] == ["w"]
        await store.enqueue("s", Input("send", "next", "n"))
        claim = await store.claim("a", seconds=60, cap=16, session="s")
        assert claim is not None
        assert (claim.start, [m.text for m in claim.messages]) == (1, ["kept"])


# The rows a store of schema 2 left: turn "a" ended, turn "b" running under holder "old"
# (epoch 2), input "c" queued; the transcript the prompt and the answer of "a".
_SCHEMA_2_ROWS = (
    "INSERT INTO steerable_service (session, epoch, holder, expires, running, queued, inputs,"
    " turns, events) VALUES ('s', 2, 'old', 4102444800, 'b', 1, 3, 2, 0)",
    "INSERT INTO steerable_inputs (session, seq, id, kind, text, ahead, state, turn) VALUES"
    " ('s', 1, 'a', 'send', '\"one\"', 0, 'prompt', 'a'),"
    " ('s', 2, 'b', 'send', '\"two\"', 1, 'prompt', 'b'),"
    " ('s', 3, 'c', 'send', '\"three\"', 2, 'waiting', NULL)",
    "INSERT INTO steerable_turns (session, id, ord, start_position, cap, state, epoch, steps,"
    " end_position, answer) VALUES ('s', 'a', 1, 0, 16, 'completed', 1, 1, 2, '\"done\"'),"
    " ('s', 'b', 2, 2, 16, 'running', 2, 0, NULL, NULL)",
)


async def test_a_database_of_schema_2_upgrades_keeping_its_turns_running(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with server.scratch_database() as pool:
        monkeypatch.setattr("steerable.stores.mysql._migrate.MIGRATIONS", MIGRATIONS[:2])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert await migrate(pool) == [1, 2]
        monkeypatch.undo()
        old = [user("one", id="a"), assistant("done")]
        batch = json.dumps([[m.id, codec.encode(m)] for m in old])
        async with pool.acquire() as conn, conn.cursor() as cursor:
            await cursor.execute("CALL steerable_save_v1('s', 0, 0, %s)", (batch,))
        for statement in _SCHEMA_2_ROWS:
            await server.on_pool(pool, statement)
        assert await migrate(pool) == [3, 4, 5, 6, 7]
        store = MySQLStore(pool)
        turns = await store.turns("s", after=0, limit=10)
        assert [(t.id, t.seq, t.state, t.started_at, t.usage) for t in turns] == [
            ("a", 1, "completed", None, {}),
            ("b", 2, "running", None, {}),
        ]
        assert turns[1].holder == "old"
        entries = await store.transcript("s", after=-1, limit=10)
        assert [(e.turn, e.at) for e in entries] == [("a", None), ("a", None)]
        waiting = await store.status("s")
        assert [(w.id, w.at, w.metadata, w.trace) for w in waiting.waiting] == [("c", 0.0, {}, {})]
        assert (waiting.waiting_total, waiting.metadata) == (1, {})
        await store.stop("s")
        assert await store.stopping("old") == ["s"]
        lease = Lease("s", "old", 2, 4102444800.0)
        await store.step(lease, [user("two", id="b"), assistant("stopped")], at=2, take=16)
        await store.end_turn(lease, Outcome("stopped", usage={"output_tokens": 1}))
        after = await store.transcript("s", after=1, limit=10)
        assert all(e.at is not None for e in after) and len(after) == 2
        ended = await store.turn("s", "b")
        assert ended is not None and ended.ended_at is not None
        assert ended.usage == {"output_tokens": 1}
        claim = await store.claim("new", seconds=60, cap=16, session="s")
        assert claim is not None and claim.turn == "c" and claim.start == 4
        started = await store.turn("s", "c")
        assert started is not None and (started.seq, started.started_at is not None) == (3, True)


async def test_a_step_3_cut_off_half_way_runs_again_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with server.scratch_database() as pool:
        monkeypatch.setattr("steerable.stores.mysql._migrate.MIGRATIONS", MIGRATIONS[:2])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert await migrate(pool) == [1, 2]
            monkeypatch.undo()
            # a migrator that died after the columns were added, before the version was
            # recorded (and before it dropped its procedure)
            for statement in MIGRATIONS[2].steps[:3]:
                await server.on_pool(pool, statement)
            assert await migrate(pool) == [3, 4, 5, 6, 7]
        store = MySQLStore(pool)
        await store.enqueue("s", Input("send", "go", "t", {"k": 1}))
        view = await store.input("s", "t")
        assert view is not None and view.metadata == {"k": 1}
        procedures = await server.on_pool(
            pool,
            "SELECT ROUTINE_NAME FROM information_schema.ROUTINES"
            " WHERE ROUTINE_SCHEMA = DATABASE() ORDER BY ROUTINE_NAME",
        )
        assert [name for (name,) in procedures] == _PROCEDURES


async def test_a_lease_of_an_older_epoch_is_refused_whole_even_from_the_same_holder(
    store: MySQLStore,
) -> None:
    sid = "fenced-by-epoch"
    await store.enqueue(sid, Input("send", "go", "p"))
    first = await store.claim("a", seconds=0.0, cap=16, session=sid)
    assert first is not None
    await store.enqueue(sid, Input("steer", "s", "s1"))
    second = await store.claim("a", seconds=60, cap=16, session=sid)  # the same holder again
    assert second is not None
    assert second.lease.epoch == first.lease.epoch + 1
    before = await _rows(sid)
    stale = first.lease
    with pytest.raises(Fenced):
        await store.step(stale, [user("go", id="p")], at=0, take=16)
    with pytest.raises(Fenced):
        await store.end_turn(stale, Outcome("completed", "x"))
    with pytest.raises(Fenced):
        await store.renew(stale, seconds=60)
    assert await _rows(sid) == before
    steered = await store.step(second.lease, [user("go", id="p")], at=0, take=16)
    assert [m.id for m in steered] == ["s1"]


async def test_only_sessions_with_work_are_in_the_claim_index(store: MySQLStore) -> None:
    sid = "indexed"
    await store.enqueue(sid, Input("send", "go", "p"))
    claimable, _ = await _claimable(sid)
    assert claimable == 0  # waiting, no lease: at once
    claim = await store.claim("a", seconds=60, cap=16, session=sid)
    assert claim is not None
    claimable, expires = await _claimable(sid)
    assert claimable == expires is not None  # running: once the lease expires
    await store.step(claim.lease, [user("go", id="p"), assistant("done")], at=0, take=0)
    await store.end_turn(claim.lease, Outcome("completed", "done"))
    claimable, _ = await _claimable(sid)
    assert claimable is None  # idle: not in the index at all


async def test_an_end_s_last_save_stores_what_a_step_stores(store: MySQLStore) -> None:
    """The end's own insert (not the step procedure's) keeps big and non-ASCII bodies and
    raw tool arguments byte for byte, and stamps each message with the server's time."""
    call = Message("assistant", (ToolCall("c1", "f", '{"a":  1, "b":"\\u00e9"}'),))
    last = [assistant("é😀 \\ ' \" " * 100_000), call, assistant("x" * 70_000)]
    for sid, ends in (("by-step", False), ("by-end", True)):
        await store.enqueue(sid, Input("send", "go", "p"))
        claim = await store.claim("a", seconds=60, cap=16, session=sid)
        assert claim is not None
        await store.step(claim.lease, [user("go", id="p")], at=0, take=16)
        if ends:
            await store.end_turn(claim.lease, Outcome("completed"), last=last, at=1)
        else:
            await store.step(claim.lease, last, at=1, take=0, final=True)
            await store.end_turn(claim.lease, Outcome("completed"))
        assert (await store.messages(sid))[1:] == last
    bodies = "SELECT position, body, at IS NOT NULL FROM steerable_messages WHERE session = %s"
    assert await server.query(bodies, ("by-end",)) == await server.query(bodies, ("by-step",))


async def test_lease_times_do_not_depend_on_the_connection_s_time_zone() -> None:
    expiries = []
    for zone in ("+00:00", "+05:00", "-09:30"):
        sid = f"zone{zone}"
        async with server.open_store(server.DATABASE, init_command=f"SET time_zone = '{zone}'") as (
            store
        ):
            assert isinstance(store, MySQLStore)
            await store.enqueue(sid, Input("send", "go", "p"))
            claim = await store.claim("a", seconds=3600, cap=16, session=sid)
            assert claim is not None
            expiries.append(claim.lease.expires_at)
            events = await store.events(sid, after=0, limit=10)
            assert all(abs(e.at - (claim.lease.expires_at - 3600)) < 600 for e in events)
    assert max(expiries) - min(expiries) < 600  # the zones are hours apart


async def test_a_scanning_claim_finds_a_session_a_view_holds_in_share_mode(
    store: MySQLStore, pool: Any
) -> None:
    """SKIP LOCKED skips a row a view reads in share mode: the scan must not miss its work."""
    import asyncio

    sid = "read-while-claimed"
    await store.enqueue(sid, Input("send", "go"))
    async with pool.acquire() as reader, reader.cursor() as cursor:
        await reader.begin()
        await cursor.execute(
            "SELECT session FROM steerable_service WHERE session = %s LOCK IN SHARE MODE", (sid,)
        )

        async def scan() -> list[str]:
            claimed = []
            while (claim := await store.claim("a", seconds=60, cap=16)) is not None:
                claimed.append(claim.lease.session)
            return claimed

        task = asyncio.create_task(scan())
        await asyncio.sleep(0.3)
        await reader.rollback()
        claimed = await task
    assert sid in claimed


async def _written(session: str) -> tuple[Any, ...]:
    """What the service wrote for ``session``, as a claim and its first step leave it: the
    messages (bodies byte for byte), the events' data as JSON values, the turns' counts and
    the inputs' states."""
    messages = await server.query(
        "SELECT position, id, body FROM steerable_messages WHERE session = %s ORDER BY position",
        (session,),
    )
    events = await server.query(
        "SELECT id, kind, turn, data FROM steerable_events WHERE session = %s ORDER BY id",
        (session,),
    )
    turns = await server.query(
        "SELECT id, start_position, steps, steers_taken, offered FROM steerable_turns"
        " WHERE session = %s",
        (session,),
    )
    inputs = await server.query(
        "SELECT id, state, turn, step FROM steerable_inputs WHERE session = %s ORDER BY seq",
        (session,),
    )
    return (
        list(messages),
        [(id, kind, turn, json.loads(data)) for id, kind, turn, data in events],
        list(turns),
        list(inputs),
    )


async def test_a_first_claim_writes_what_a_claim_and_a_step_write(store: MySQLStore) -> None:
    """The claim's own statements (not the step procedure's) leave the rows a claim and then
    its first step leave: the prompt's unsteered body and the steers' byte for byte, a steer
    the transcript holds taken and not recorded again, the cap, the events, the counts."""
    written = []
    for sid, first in (("first-apart", False), ("first-with-claim", True)):
        await store.save(sid, [user("before", id="b"), user("seen", id="s-seen")], at=0)
        await store.enqueue(sid, Input("send", "é😀 \\ ' \" go" * 1000, "t-é"))
        for id in ("s1", "s-seen", "s-é😀", "s-left"):
            await store.enqueue(sid, Input("steer", f"steer {id} ' \\", id))
        claim = await store.claim("a", seconds=60, cap=3, session=sid, first=first)
        assert claim is not None
        if not first:
            message = claim.prompt.message(steered=False)
            await store.step(claim.lease, [message], at=claim.start, take=claim.cap)
        written.append(await _written(sid))
    apart, together = written
    assert together == apart
    messages, _, turns, inputs = together
    assert [text_of(id) for _, id, _ in messages][1:] == ["s-seen", "t-é", "s1", "s-é😀"]
    assert [tuple(row[2:]) for row in turns] == [(1, 3, 4)]  # steps, taken, offered
    states = [(text_of(id), text_of(state)) for id, state, _, _ in inputs]
    assert states == [
        *[("t-é", "prompt"), ("s1", "taken"), ("s-seen", "taken"), ("s-é😀", "taken")],
        ("s-left", "waiting"),
    ]


async def test_a_first_claim_whose_step_fails_is_refused_whole(
    store: MySQLStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure after the step's take and insert rolls back the claim too: no turn, no
    event, no message, the steers waiting; the claim is made again whole."""
    sid = "first-refused-whole"
    await store.enqueue(sid, Input("send", "go", "t"))
    await store.enqueue(sid, Input("steer", "and", "s"))
    before = await _rows(sid), await _written(sid)
    append = _service._Last.append

    async def failing(self: Any, tx: Any, **kw: Any) -> None:
        await append(self, tx, **kw)
        raise StoreUnavailable("injected after the step's insert")

    monkeypatch.setattr(_service._Last, "append", failing)
    with pytest.raises(StoreUnavailable, match="injected"):
        await store.claim("a", seconds=60, cap=16, session=sid, first=True)
    assert (await _rows(sid), await _written(sid)) == before
    epoch = await server.query("SELECT epoch FROM steerable_service WHERE session = %s", (sid,))
    assert epoch[0][0] == 0
    monkeypatch.undo()
    claim = await store.claim("a", seconds=60, cap=16, session=sid, first=True)
    assert claim is not None and claim.lease.epoch == 1
    assert claim.taken is not None and [m.id for m in claim.taken] == ["s"]
    assert [m.id for m in await store.messages(sid)] == ["t", "s"]


async def test_a_first_claim_waits_for_a_save_under_way_and_starts_after_it(
    store: MySQLStore, pool: Any
) -> None:
    """The claim takes the core's lock before it reads the transcript: a save holding it is
    waited for, and the turn starts after what it saved (read under the lock, never a
    conflict of the claim's own)."""
    import asyncio

    sid = "first-after-a-save"
    await store.save(sid, [user("before", id="b")], at=0)
    await store.enqueue(sid, Input("send", "go", "t"))
    async with pool.acquire() as saver, saver.cursor() as cursor:
        await saver.begin()  # a save under way, as the save procedure makes it
        await cursor.execute(
            "INSERT INTO steerable_sessions (session) VALUES (%s)"
            " ON DUPLICATE KEY UPDATE session = session",
            (sid,),
        )
        await cursor.execute(
            "INSERT INTO steerable_messages (session, position, id, body) VALUES (%s, 1, %s, %s)",
            (sid, "late", codec.encode(assistant("late", id="late"))),
        )
        task = asyncio.create_task(store.claim("a", seconds=60, cap=16, session=sid, first=True))
        await asyncio.sleep(0.3)
        assert not task.done(), "the claim did not wait for the core's lock"
        await saver.commit()
        claim = await task
    assert claim is not None and claim.start == 2 and claim.taken == []
    assert [m.id for m in claim.messages] == ["b", "late"]
    assert [m.id for m in await store.messages(sid)] == ["b", "late", "t"]


async def test_a_takeover_of_a_turn_that_stored_nothing_makes_no_first_step(
    store: MySQLStore,
) -> None:
    """A takeover is resumed from what is stored, even when the earlier holder stored not
    even the prompt (its claim made no step): no step with the takeover's claim."""
    import asyncio

    sid = "first-takeover-of-nothing"
    await store.enqueue(sid, Input("send", "go", "t"))
    await store.enqueue(sid, Input("steer", "and", "s"))
    earlier = await store.claim("a", seconds=0.2, cap=16, session=sid)
    assert earlier is not None and earlier.taken is None
    await asyncio.sleep(0.5)
    again = await store.claim("b", seconds=60, cap=16, session=sid, first=True)
    assert again is not None and again.resumed and again.taken is None
    assert (again.steps, again.steers_taken) == (0, 0)
    assert await store.messages(sid) == []
    waiting = await store.input(sid, "s")
    assert waiting is not None and waiting.state == "waiting"
