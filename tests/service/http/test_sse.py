"""The event stream over a real server: durable events once and in order, resumable with
``Last-Event-ID`` (on another replica too, over Postgres), ``refetch`` for an id beyond the
last, live deltas (across replicas through Postgres notifications), keep-alives, and a
client that leaves taking its subscription with it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from steerable.service.demo import demo_agent
from tests.service.http.conftest import Build, Frame, LiveServer, app_over, frames
from tests.service.http.test_api import ended

HANG = 30.0  # a hang guard, far above what any stream here needs


async def read_until(
    http: httpx.AsyncClient,
    sid: str,
    done: Callable[[list[Frame]], bool],
    *,
    headers: dict[str, str] | None = None,
    params: dict[str, Any] | None = None,
    then: Callable[[], Awaitable[object]] | None = None,
) -> list[Frame]:
    """The frames of one connection to the stream, until ``done(frames)``; then it leaves.

    ``then`` is awaited once the first frame came (the stream is subscribed by then).
    """
    seen: list[Frame] = []
    async with (
        asyncio.timeout(HANG),
        http.stream(
            "GET", f"/v1/sessions/{sid}/events", headers=headers, params=params
        ) as response,
    ):
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        async for frame in frames(response):
            seen.append(frame)
            if then is not None and len(seen) == 1:
                await then()
            if done(seen):
                return seen
    raise AssertionError(f"the stream ended early: {seen}")


def durable(seen: list[Frame]) -> list[Frame]:
    """The frames with an id that are events (not refetch, delta or comment)."""
    return [f for f in seen if f.id is not None and f.event != "refetch"]


def ended_turn(turn: str) -> Callable[[list[Frame]], bool]:
    """Whether the frames include the end of ``turn``."""
    return lambda seen: any(f.event == "turn_ended" and f.json()["turn"] == turn for f in seen)


def check_in_order(events: list[Frame]) -> None:
    """Ids 1, 2, ... with no gap and no repeat, each frame's data its own event."""
    ids = [int(f.id or 0) for f in events]
    assert ids == list(range(1, len(ids) + 1)), ids
    for frame in events:
        data = frame.json()
        assert data["id"] == int(frame.id or 0) and data["kind"] == frame.event
        assert set(data) == {"id", "kind", "turn", "data", "at"}


async def test_a_stream_sees_a_turn_once_in_order_with_its_deltas(
    client: httpx.AsyncClient,
) -> None:
    await client.post("/v1/sessions/s/messages", json={"text": "first", "id": "a"})
    await ended(client, "s", "a")

    async def send() -> None:
        await client.post("/v1/sessions/s/messages", json={"text": "second", "id": "b"})

    seen = await read_until(client, "s", ended_turn("b"), then=send)
    events = durable(seen)
    check_in_order(events)
    start = next(i for i, f in enumerate(events) if f.json()["data"].get("id") == "b")
    assert events[start].event == "input"  # an input that waits to be a turn has no turn yet
    kinds = [f.event for f in events[start:]]
    assert kinds[-1] == "turn_ended"
    assert {"turn_started", "step", "message"} <= set(kinds)
    deltas = [f.json() for f in seen if f.event == "delta"]
    assert all(f.id is None for f in seen if f.event == "delta")
    assert "".join(d["text"] for d in deltas if d["turn"] == "b").strip() == "answered: second"


async def test_a_reconnect_with_last_event_id_misses_nothing_and_repeats_nothing(
    client: httpx.AsyncClient,
) -> None:
    await client.post("/v1/sessions/s/messages", json={"text": "go", "id": "a"})
    whole = durable(await read_until(client, "s", ended_turn("a")))
    check_in_order(whole)
    cut = len(whole) // 2
    head = durable(await read_until(client, "s", lambda seen: len(durable(seen)) >= cut))
    last = head[-1].id
    assert last is not None
    rest = await read_until(client, "s", ended_turn("a"), headers={"Last-Event-ID": last})
    assert [f.id for f in head + durable(rest)] == [f.id for f in whole]
    by_query = await read_until(client, "s", ended_turn("a"), params={"after": last})
    assert [f.id for f in durable(by_query)] == [f.id for f in durable(rest)]


async def test_an_id_beyond_the_last_is_told_to_refetch(client: httpx.AsyncClient) -> None:
    await client.post("/v1/sessions/s/messages", json={"text": "go", "id": "a"})
    whole = durable(await read_until(client, "s", ended_turn("a")))
    last = len(whole)
    seen = await read_until(
        client, "s", lambda seen: len(seen) >= 1, headers={"Last-Event-ID": str(last + 5)}
    )
    assert seen[0].event == "refetch"
    assert seen[0].json() == {"last": last}
    assert seen[0].id == str(last)  # an EventSource goes on from the last event
    after: list[Frame] = []
    headers = {"Last-Event-ID": str(last + 500)}
    async with (
        asyncio.timeout(HANG),
        client.stream("GET", "/v1/sessions/s/events", headers=headers) as stream,
    ):
        async for frame in frames(stream):
            after.append(frame)
            if len(after) == 1:  # told to refetch: now b is written after the stream's start
                await client.post("/v1/sessions/s/messages", json={"text": "more", "id": "b"})
            if ended_turn("b")(after):
                break
    assert after[0].event == "refetch"
    assert after[0].json() == {"last": last}
    assert int(durable(after)[0].id or 0) == last + 1  # not the stream from the start


async def test_an_idle_stream_gets_keep_alives_and_a_leaving_client_its_subscription(
    serve_app: Callable[[Build], LiveServer], store_url: str
) -> None:
    server = serve_app(app_over(store_url, keepalive=0.05, poll=0.05))
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        await http.post("/v1/sessions/s/messages", json={"text": "go", "id": "a"})
        await ended(http, "s", "a")
        seen = await read_until(
            http, "s", lambda seen: sum("keep-alive" in f.comments for f in seen) >= 2
        )
        assert durable(seen)  # the events came first, then the keep-alives
    assert server.app is not None
    fanout = server.app.state.live.fanout

    async def subscriptions() -> int:
        for _ in range(3000):
            if fanout.count() == 0:
                return 0
            await asyncio.sleep(0.01)
        return int(fanout.count())

    assert server.call(subscriptions) == 0


async def test_a_stream_on_one_replica_sees_a_turn_another_runs(
    postgres_url: str, serve_app: Callable[[Build], LiveServer]
) -> None:  # the database first: it is dropped after the servers stopped
    """Two apps over one Postgres database: replica 1 serves no turns, replica 2 runs them."""
    one = serve_app(app_over(postgres_url, serve=False, replica="one"))
    two = serve_app(app_over(postgres_url, agent=demo_agent(seconds=0.3), replica="two"))
    assert two.app is not None
    listening = two.app.state.live.listening
    assert one.app is not None
    for app in (one.app, two.app):
        await asyncio.wait_for(_listening(app, one if app is one.app else two), HANG)
    async with (
        httpx.AsyncClient(base_url=one.url, timeout=30) as first,
        httpx.AsyncClient(base_url=two.url, timeout=30) as second,
    ):
        await second.post("/v1/sessions/s/messages", json={"text": "warm up", "id": "w"})
        await ended(second, "s", "w")

        async def send() -> None:
            sent = await second.post("/v1/sessions/s/messages", json={"text": "go", "id": "a"})
            assert sent.status_code == 202

        seen = await read_until(first, "s", ended_turn("a"), then=send)
        events = durable(seen)
        check_in_order(events)
        assert any(
            f.event == "turn_started" and f.json()["data"]["holder"] == "two" for f in events
        )
        deltas = "".join(f.json()["text"] for f in seen if f.event == "delta")
        assert "answered: go" in deltas  # through NOTIFY: replica 1 runs no turn
        cut = events[len(events) // 2].id
        assert cut is not None
        rest = durable(
            await read_until(second, "s", ended_turn("a"), headers={"Last-Event-ID": cut})
        )
        assert [f.id for f in events if int(f.id or 0) <= int(cut)] + [f.id for f in rest] == [
            f.id for f in events
        ]
        beyond = await read_until(
            second, "s", lambda s: len(s) >= 1, headers={"Last-Event-ID": str(len(events) + 9)}
        )
        assert beyond[0].event == "refetch"
        assert beyond[0].json() == {"last": len(events)}
    assert listening.is_set()


async def _listening(app: Any, server: LiveServer) -> None:
    async def ready() -> bool:
        for _ in range(3000):
            if app.state.live.listening.is_set():
                return True
            await asyncio.sleep(0.01)
        return False

    assert await asyncio.to_thread(server.call, ready)


async def test_a_reply_s_deltas_come_after_the_events_its_step_stored(
    client: httpx.AsyncClient,
) -> None:
    """The answer's deltas follow the tool result's ``message`` and its ``step`` event."""
    await client.post("/v1/sessions/s/messages", json={"text": "first", "id": "a"})
    await ended(client, "s", "a")
    for turn in ("b", "c", "d"):

        async def send(turn: str = turn) -> None:
            await client.post("/v1/sessions/s/messages", json={"text": turn, "id": turn})

        seen = await read_until(client, "s", ended_turn(turn), then=send)
        mine = [f for f in seen if f.data and f.json().get("turn") == turn]
        first_delta = next(i for i, f in enumerate(mine) if f.event == "delta")
        steps = [i for i, f in enumerate(mine) if f.event == "step"]
        assert len(steps) == 2 and steps[-1] < first_delta, [f.event for f in mine]


async def _quiet_then_send(
    reader: httpx.AsyncClient, writer: httpx.AsyncClient, *, quiet: float
) -> float:
    """Seconds from a send (through ``writer``) to its ``input`` event on a stream of
    ``reader`` that had been quiet for ``quiet`` seconds (its poll backed off by then)."""
    loop = asyncio.get_running_loop()
    sent_at = 0.0

    async def send() -> None:
        nonlocal sent_at
        await asyncio.sleep(quiet)
        sent_at = loop.time()
        answer = await writer.post("/v1/sessions/s/messages", json={"text": "go", "id": "late"})
        assert answer.status_code == 202

    def arrived(seen: list[Frame]) -> bool:
        return any(f.event == "input" and f.json()["data"]["id"] == "late" for f in seen)

    task: asyncio.Task[None] | None = None

    async def start() -> None:
        nonlocal task
        task = asyncio.create_task(send())

    await read_until(reader, "s", arrived, then=start)
    assert task is not None
    await task
    return loop.time() - sent_at


async def test_a_write_wakes_the_stream_rather_than_waiting_for_its_poll(
    serve_app: Callable[[Build], LiveServer], store_url: str
) -> None:
    """The stream polls at most every 300 s here: the send's wake brings its event."""
    server = serve_app(app_over(store_url, serve=False, poll=300.0))
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as http:
        await http.post("/v1/sessions/s/messages", json={"text": "first", "id": "a"})
        waited = await _quiet_then_send(http, http, quiet=8.0)
    assert waited < 4.0  # polled, the stream would next read the store 6 to 13 s on


async def test_a_write_on_one_replica_wakes_a_stream_on_another(
    postgres_url: str, serve_app: Callable[[Build], LiveServer]
) -> None:
    """Over Postgres the wake goes through NOTIFY: a send to replica 2 reaches a stream of
    replica 1 (which polls at most every 300 s) at once."""
    one = serve_app(app_over(postgres_url, serve=False, replica="one", poll=300.0))
    two = serve_app(app_over(postgres_url, serve=False, replica="two"))
    for server in (one, two):
        assert server.app is not None
        await asyncio.wait_for(_listening(server.app, server), HANG)
    async with (
        httpx.AsyncClient(base_url=one.url, timeout=60) as first,
        httpx.AsyncClient(base_url=two.url, timeout=60) as second,
    ):
        await second.post("/v1/sessions/s/messages", json={"text": "first", "id": "a"})
        waited = await _quiet_then_send(first, second, quiet=8.0)
    assert waited < 4.0
