"""The service engine across real processes: ``scripts/service_replica.py`` over one database.

The promises of ``test_engine.py`` again, but each replica is an OS process of its own over
one Postgres database (a fresh one per test) or one SQLite file, and a replica dies by
SIGKILL, freezes by SIGSTOP, or loses its database through a relay the test cuts. Inputs go
*through* a chosen replica; what the model was asked comes from the requests file every
replica appends to; what was recorded is read from the store by the test itself.

Waits are hang guards far above what each behaviour needs, never timing assertions; the
one exception is named where it is made (the stop that only a notification delivers in time).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from steerable.messages import Message, transcript_problems
from steerable.service import Service
from steerable.service_store import END_STATES, ServiceEvent, TurnView
from steerable.stores.url import open_url
from tests.service.replicas import ReplicaProcess, Replicas, until

pytestmark = pytest.mark.slow

BACKENDS = ["postgres", "sqlite"]


# -- the database, the replicas, the test's own view of the store ---------------------------


def _postgres_url(database: str, port: int | None = None) -> str:
    from tests.stores.postgres.support import DSN

    parts = urlsplit(DSN)
    netloc = parts.netloc if port is None else f"{parts.netloc.rsplit(':', 1)[0]}:{port}"
    return urlunsplit((parts.scheme, netloc, f"/{database}", "", ""))


@pytest.fixture
async def postgres() -> AsyncIterator[str]:
    """A fresh Postgres database of this test: its name; dropped after (replicas killed)."""
    from tests.stores.postgres.support import fresh_database

    async with fresh_database("steerable_replicas_") as name:
        yield name


@pytest.fixture(params=BACKENDS)
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """The store URL of this test: a fresh Postgres database, or a fresh SQLite file."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'service.db'}"
        return
    from tests.stores.postgres.support import fresh_database

    async with fresh_database("steerable_replicas_") as name:
        yield _postgres_url(name)


@pytest.fixture
async def group(url: str, tmp_path: Path) -> AsyncIterator[Replicas]:
    """The replicas of this test (none started yet); every one killed at teardown."""
    async with Replicas(url, tmp_path) as replicas:
        yield replicas


@pytest.fixture
async def view(url: str) -> AsyncIterator[Service]:
    """The test's own front door on the store (no agent: it serves nothing)."""
    async with open_url(url + ("?pool=2" if url.startswith("postgres") else "")) as store:
        yield Service(store)


async def _events(view: Service, session: str, kind: str) -> list[ServiceEvent]:
    events = await view.events(session, after=0, limit=1000)
    return [e for e in events if e.kind == kind]


async def _messages(view: Service, session: str) -> list[Message]:
    return [e.message for e in await view.transcript(session, limit=1000)]


async def _ended(view: Service, session: str, turn: str, seconds: float = 30.0) -> TurnView:
    done = await view.wait(session, turn, seconds=seconds)
    assert done is not None and done.state in END_STATES, f"turn {turn} did not end: {done}"
    return done


async def _holder(group: Replicas, turn: str) -> str:
    """The replica that asked the model the first request of ``turn`` (it runs the turn)."""
    await until(lambda: _asked(group, turn, 1), f"a model request of turn {turn}")
    name: str = group.requests(turn)[0]["replica"]
    return name


async def _asked(group: Replicas, turn: str, count: int, *, results: bool = False) -> bool:
    requests = group.requests(turn)
    if results:
        requests = [r for r in requests if r["messages"][-1]["result"]]
    return len(requests) >= count


def _once_each(messages: list[Message], ids: dict[str, bool]) -> None:
    """Each input id appears once, steered as ``ids`` says; the transcript is valid."""
    seen = [m.id for m in messages]
    for id, steered in ids.items():
        assert seen.count(id) == 1, f"input {id} appears {seen.count(id)} times: {seen}"
        assert next(m for m in messages if m.id == id).steered is steered, id
    assert transcript_problems(messages) == []


# -- a send, a steer through another replica ------------------------------------------------


async def test_a_send_runs_on_one_replica_and_a_steer_through_another_joins_its_next_request(
    group: Replicas, view: Service
) -> None:
    a, _, _ = await group.start("a", "b", "c", lease=2, seconds=1.0)
    sent = await a.call("send", session="s", text="plan my week", id="p")
    assert (sent["turn"], sent["ahead"]) == (None, 0)
    holder = await _holder(group, "p")
    steer = await group.others(holder)[0].call("steer", session="s", text="skip fri", id="k")
    assert (steer["id"], steer["turn"]) == ("k", "p")
    done = await _ended(view, "s", "p")
    assert (done.state, done.text) == ("completed", "answered: plan my week | skip fri")
    requests = group.requests("p")
    assert len(requests) == 2 and {r["replica"] for r in requests} == {holder}
    second = requests[1]["messages"]
    assert second[-2]["result"] and (second[-1]["id"], second[-1]["steered"]) == ("k", True)
    assert [m["id"] for m in second].count("k") == 1
    assert [e.turn for e in await _events(view, "s", "turn_started")] == ["p"]
    counters = await group.counters()
    assert [c["claims"] for c in counters.values()].count(1) == 1
    assert sum(c["claims"] for c in counters.values()) == 1 and counters[holder]["claims"] == 1


# -- steers that are turns of their own -----------------------------------------------------


async def test_a_steer_while_the_model_writes_the_answer_is_the_next_turn_before_a_later_send(
    group: Replicas, view: Service
) -> None:
    a, _, _ = await group.start("a", "b", "c", lease=2, seconds=0.1, model_delay=1.0)
    await a.call("send", session="s", text="one", id="p")
    await until(lambda: _asked(group, "p", 1, results=True), "the request after the tool")
    other = group.others(group.requests("p")[-1]["replica"])[0]
    late = await other.call("steer", session="s", text="too late", id="late")
    assert late["turn"] == "p"
    await other.call("send", session="s", text="after", id="after")
    for turn in ("p", "late", "after"):
        await _ended(view, "s", turn)
    texts = [(await view.turn("s", t)) for t in ("p", "late", "after")]
    assert [t.text for t in texts if t] == [
        "answered: one",
        "answered: too late",
        "answered: after",
    ]
    started = await _events(view, "s", "turn_started")
    assert [e.turn for e in started] == ["p", "late", "after"]
    _once_each(await _messages(view, "s"), {"p": False, "late": False, "after": False})


async def test_the_17th_steer_is_a_turn_of_its_own_and_with_no_turn_a_steer_starts_one(
    group: Replicas, view: Service
) -> None:
    a, _, _ = await group.start("a", "b", "c", lease=2, seconds=2.0)
    await a.call("send", session="s", text="go", id="p")
    others = group.others(await _holder(group, "p"))
    answers = [
        await others[i % 2].call("steer", session="s", text=f"s{i}", id=f"s{i}") for i in range(17)
    ]
    assert [x["turn"] for x in answers] == ["p"] * 16 + [None]
    idle = await others[0].call("steer", session="t", text="hello", id="h")
    assert idle["turn"] is None
    done = await _ended(view, "s", "p")
    assert done.text == "answered: " + " | ".join(["go", *(f"s{i}" for i in range(16))])
    assert done.steers_taken == 16
    own = await _ended(view, "s", "s16")
    assert (own.state, own.text) == ("completed", "answered: s16")
    started = await _ended(view, "t", "h")
    assert (started.state, started.text) == ("completed", "answered: hello")
    _once_each(await _messages(view, "s"), {f"s{i}": i < 16 for i in range(17)})


# -- stop from any replica ------------------------------------------------------------------


async def test_a_stop_through_another_replica_stops_the_turn_and_frees_its_untaken_steer(
    group: Replicas, view: Service, url: str
) -> None:
    # The tool takes far longer than any wait here: only the stop ends these turns. Where
    # the database notifies (Postgres), the renewal is made too slow to carry the stop in
    # time, so the turn ends within the wait only if the notification reached the holder;
    # elsewhere (SQLite) the renewal carries it, every lease / 3.
    slow = {"lease": 60, "renew_every": 50} if url.startswith("postgres") else {"lease": 1.5}
    a, _, _ = await group.start("a", "b", "c", seconds=120, **slow)
    await a.call("send", session="s", text="go", id="p")
    steerer, stopper = group.others(await _holder(group, "p"))
    steer = await steerer.call("steer", session="s", text="not taken", id="k")
    assert steer["turn"] == "p"
    assert await stopper.call("stop", session="s") == "p"
    done = await _ended(view, "s", "p", seconds=15)
    assert done.state == "stopped" and done.steers_taken == 0
    await until(lambda: _started(view, "s", "k"), "the untaken steer's own turn", seconds=15)
    fate = await view.input("s", "k")
    assert fate is not None and (fate.state, fate.turn) == ("prompt", "k")
    assert await stopper.call("stop", session="s") == "k"
    assert (await _ended(view, "s", "k", seconds=15)).state == "stopped"
    assert [e.turn for e in await _events(view, "s", "turn_ended")] == ["p", "k"]
    _once_each(await _messages(view, "s"), {"p": False, "k": False})


async def _started(view: Service, session: str, turn: str) -> bool:
    return turn in [e.turn for e in await _events(view, session, "turn_started")]


# -- a replica that dies, a replica that freezes --------------------------------------------


async def test_a_replica_killed_mid_tool_is_carried_on_by_another_each_input_once(
    group: Replicas, view: Service
) -> None:
    a, _, _ = await group.start("a", "b", "c", lease=1.5, seconds=1.0, calls=2)
    await a.call("send", session="s", text="go", id="p")
    holder = group[await _holder(group, "p")]
    x, y = group.others(holder.name)
    assert (await x.call("steer", session="s", text="first", id="s1"))["turn"] == "p"
    await until(lambda: _asked(group, "p", 2), "the second step (the steer taken)")
    assert (await y.call("steer", session="s", text="second", id="s2"))["turn"] == "p"
    await x.call("send", session="s", text="next", id="q")
    holder.kill()  # mid tool 2, with s2 offered and not taken
    done = await _ended(view, "s", "p")
    assert (done.state, done.epoch) == ("completed", 2)
    assert done.text == "answered: go | first | second"
    assert (await _ended(view, "s", "q")).state == "completed"
    counters = await group.counters()
    assert sum(c["resumed"] for c in counters.values()) == 1
    carriers = {r["replica"] for r in group.requests("p")[2:]}
    assert carriers and holder.name not in carriers
    messages = await _messages(view, "s")
    _once_each(messages, {"p": False, "s1": True, "s2": True, "q": False})
    assert [e.turn for e in await _events(view, "s", "turn_ended")] == ["p", "q"]


async def test_a_replica_paused_past_its_lease_writes_nothing_once_resumed(
    group: Replicas, view: Service
) -> None:
    # The holder starts alone; the others' tool is slower than what is left of the holder's,
    # so once resumed it tries to write before the new holder does: only the fence stops it.
    (holder,) = await group.start("a", lease=1.5, seconds=1.0)
    await holder.call("send", session="s", text="go", id="p")
    await _holder(group, "p")
    holder.pause()
    await group.start("b", "c", lease=1.5, seconds=2.5)
    await until(lambda: _taken_over(view), "another replica's claim of the turn")
    holder.resume()
    done = await _ended(view, "s", "p")
    assert (done.state, done.epoch) == ("completed", 2)
    await until(lambda: _gave_up(holder), "the resumed replica fenced, its turn given up")
    assert (await holder.counters())["fenced"] >= 1
    # the core saves before each model request: a second request of a's means a save landed
    assert [r["replica"] for r in group.requests("p")].count("a") == 1
    messages = await _messages(view, "s")
    assert len([m for m in messages if m.tool_results]) == 1
    last = [r for r in group.requests("p") if r["replica"] != "a"][-1]["messages"]
    assert [m.id for m in messages][:-1] == [m["id"] for m in last]  # the new holder's own
    _once_each(messages, {"p": False})
    assert [e.turn for e in await _events(view, "s", "turn_ended")] == ["p"]


async def _taken_over(view: Service) -> bool:
    turn = await view.turn("s", "p")
    return turn is not None and (turn.epoch or 0) >= 2


async def _gave_up(replica: ReplicaProcess) -> bool:
    counters = await replica.counters()
    return not counters["running"] and counters["fenced"] >= 1


# -- one turn per input, whoever is asked ---------------------------------------------------


async def test_one_send_id_through_two_replicas_is_one_turn_and_concurrent_sends_queue(
    group: Replicas, view: Service
) -> None:
    a, b, c = await group.start("a", "b", "c", lease=2, seconds=0.2)
    same = await asyncio.gather(*(r.call("send", session="s", text="hi", id="x") for r in (a, b)))
    assert sorted(x["duplicate"] for x in same) == [False, True]
    assert (await _ended(view, "s", "x")).state == "completed"
    assert [e.turn for e in await _events(view, "s", "turn_started")] == ["x"]
    firsts = await asyncio.gather(
        *(r.call("send", session="t", text=f"n{i}", id=f"t{i}") for i, r in enumerate((a, b, c)))
    )
    assert [x["ahead"] for x in firsts].count(0) == 1
    for first in firsts:
        assert (await _ended(view, "t", first["id"])).state == "completed"
    events = await view.events("t", after=0, limit=1000)
    bounds = [(e.kind, e.turn) for e in events if e.kind in ("turn_started", "turn_ended")]
    order = [x["id"] for x in sorted(firsts, key=lambda x: x["seq"])]
    assert bounds == [(k, t) for t in order for k in ("turn_started", "turn_ended")]


# -- a sync tool, bad input -----------------------------------------------------------------


async def test_a_sync_tool_slower_than_the_lease_keeps_its_lease(
    group: Replicas, view: Service
) -> None:
    a, _ = await group.start("a", "b", lease=1.5, seconds=3.0, blocking=True)
    await a.call("send", session="s", text="go", id="p")
    done = await _ended(view, "s", "p")
    assert (done.state, done.epoch) == ("completed", 1)
    assert [e.turn for e in await _events(view, "s", "turn_started")] == ["p"]
    counters = await group.counters()
    assert [(c["resumed"], c["fenced"]) for c in counters.values()] == [(0, 0), (0, 0)]


async def test_bad_input_is_an_error_answer_and_nothing_is_recorded(
    group: Replicas, view: Service
) -> None:
    (a,) = await group.start("a")
    bad: list[tuple[str, dict[str, Any]]] = [
        ("send", {"text": ""}),
        ("send", {"text": "   "}),
        ("send", {"text": 7}),
        ("steer", {"text": "x", "id": 7}),
        ("send", {"text": "x", "id": ""}),
    ]
    for op, fields in bad:
        answer = await a.ask(op, session="s", **fields)
        assert answer["ok"] is False and "UsageError" in answer["error"], (op, fields, answer)
    empty: dict[str, Any] = {
        "turn": None,
        "waiting": [],
        "queued": 0,
        "waiting_total": 0,
        "metadata": {},
    }
    assert await a.call("status", session="s") == {"session": "s"} | empty
    assert await a.call("status", session="nobody") == {"session": "nobody"} | empty
    assert await view.events("s", after=0, limit=10) == []
    assert await view.transcript("s") == []


# -- the database goes away mid-turn (Postgres, through a relay the test cuts) --------------


@pytest.mark.parametrize("outage", ["within-the-lease", "past-the-lease"])
async def test_the_database_going_away_mid_turn_records_nothing_twice(
    postgres: str, tmp_path: Path, outage: str
) -> None:
    from tests.stores.postgres.support import server_address
    from tests.stores.relay import Relay

    relay = Relay(*server_address())
    await relay.restore()
    direct = _postgres_url(postgres)
    async with (
        Replicas(_postgres_url(postgres, relay.port), tmp_path) as cut_off,
        Replicas(direct, tmp_path) as elsewhere,
        open_url(direct + "?pool=2") as store,
    ):
        view = Service(store)
        (a,) = await cut_off.start("a", lease=1.5, seconds=1.0, calls=2)
        await a.call("send", session="s", text="go", id="p")
        await until(lambda: _asked(cut_off, "p", 2), "the second tool call under way")
        await relay.cut()
        try:
            if outage == "within-the-lease":
                await asyncio.sleep(1.2)  # the tool ends meanwhile: its save meets the outage
            else:  # another replica, which still reaches the database, carries the turn on
                await elsewhere.start("b", lease=1.5, seconds=0.2, calls=2)
                await _ended(view, "s", "p")
        finally:
            await relay.restore()
        # carried on, by a from what is stored once the database is back, or by b
        done = await _ended(view, "s", "p")
        assert (done.state, done.text) == ("completed", "answered: go")
        await until(lambda: _idle(a), "the cut-off replica's turn to end")
        assert (await a.counters())["store_errors"] >= 1  # the outage was met
        messages = await _messages(view, "s")
        assert len([m for m in messages if m.tool_calls]) == 2
        _once_each(messages, {"p": False})
        assert [e.turn for e in await _events(view, "s", "turn_ended")] == ["p"]
        await a.call("send", session="s", text="again", id="q")  # a serves again
        assert (await _ended(view, "s", "q")).state == "completed"
        _once_each(await _messages(view, "s"), {"p": False, "q": False})
    await relay.cut()
    await asyncio.sleep(0.2)  # the aborted lines' sockets close on the loop's next turns


async def _idle(replica: ReplicaProcess) -> bool:
    return not (await replica.counters())["running"]
