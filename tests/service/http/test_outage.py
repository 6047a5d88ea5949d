"""An event stream when the database goes away under it, against a real server and Postgres.

The app's pool reaches Postgres through a relay (``tests.stores.relay``) that the test cuts:
the stream ends cleanly with one ``unavailable`` frame and one line in the log (not an
answer cut in the middle and uvicorn's "Exception in ASGI application"), and once the line
is back the pool serves every request again: no broken connection went back into it (asyncpg
would answer "another operation is in progress" on its reuse).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

import asyncpg  # type: ignore[import-untyped]
import httpx
import pytest
from fastapi import FastAPI

from steerable.service import Service
from steerable.service.client import Client
from steerable.service.demo import demo_agent
from steerable.service.http import create_app, live_feed
from steerable.stores.postgres import PostgresStore
from tests.service.http.conftest import Build, Frame, LiveServer, frames
from tests.service.http.test_api import ended
from tests.stores.postgres.support import DSN, server_address
from tests.stores.relay import Relay

HANG = 30.0


def over_relay(database: str, relays: list[Relay]) -> Build:
    """The app over ``database`` through a relay of its own (appended to ``relays``)."""

    @asynccontextmanager
    async def build() -> AsyncIterator[FastAPI]:
        relay = Relay(*server_address())
        await relay.restore()
        relays.append(relay)
        pool = await asyncpg.create_pool(
            DSN, host="127.0.0.1", port=relay.port, database=database, min_size=0, max_size=4
        )
        try:
            store = PostgresStore(pool)
            live = live_feed(store)
            service = Service(store, demo_agent(seconds=0.1), poll=0.05, live=live.sink)
            yield create_app(service, live=live, poll=0.1)
        finally:
            await relay.cut()
            pool.terminate()

    return build


async def test_a_stream_cut_by_an_outage_ends_cleanly_and_the_pool_recovers(
    postgres_url: str,
    serve_app: Callable[[Build], LiveServer],
    caplog: pytest.LogCaptureFixture,
) -> None:
    relays: list[Relay] = []
    server = serve_app(over_relay(urlsplit(postgres_url).path.lstrip("/"), relays))
    relay = relays[0]
    seen: list[Frame] = []
    async with httpx.AsyncClient(base_url=server.url, timeout=HANG) as http:
        await http.post("/v1/sessions/s/messages", json={"text": "go", "id": "a"})
        await ended(http, "s", "a")
        with caplog.at_level(logging.INFO):
            async with (
                asyncio.timeout(HANG),
                http.stream("GET", "/v1/sessions/s/events") as response,
            ):
                async for frame in frames(response):  # ends when the server ends it
                    seen.append(frame)
                    if frame.event == "turn_ended":  # every event so far: now the outage
                        await asyncio.to_thread(server.call, relay.cut)
            assert seen[-1].event == "unavailable", [f.event for f in seen]
            assert seen[-1].json()["code"] == "store_unavailable"
            records = [r for r in caplog.records if r.name.startswith(("uvicorn", "steerable"))]
            assert not [r for r in records if r.exc_info or "ASGI" in r.getMessage()]
            ends = [r for r in records if "an event stream of" in r.getMessage()]
            assert len(ends) == 1 and ends[0].levelno == logging.WARNING
        await asyncio.to_thread(server.call, relay.restore)
        # The line is back: each request is served, however many times the pooled
        # connections are reused (one that broke and went back would fail here).
        for n in range(8):
            status = await http.get("/v1/sessions/s")
            assert status.status_code == 200, (n, status.text)
            page = await http.get("/v1/sessions/s/transcript")
            assert page.status_code == 200 and len(page.json()["messages"]) == 4, page.text
        sent = await http.post("/v1/sessions/s/messages", json={"text": "again", "id": "b"})
        assert sent.status_code == 202, sent.text
        assert (await ended(http, "s", "b"))["state"] == "completed"


async def test_the_client_reconnects_after_an_unavailable_frame_missing_nothing(
    postgres_url: str, serve_app: Callable[[Build], LiveServer]
) -> None:
    relays: list[Relay] = []
    server = serve_app(over_relay(urlsplit(postgres_url).path.lstrip("/"), relays))
    relay = relays[0]
    async with Client(server.url, backoff=0.05, retries=20) as client:
        await client.send("s", "go", id="a")
        await client.turn("s", "a", wait=HANG)
        kinds: list[str] = []
        ids: list[int] = []
        async with asyncio.timeout(HANG):
            async for event in client.events("s"):
                kinds.append(event.kind)
                if event.id is not None:
                    ids.append(event.id)
                if event.kind == "turn_ended" and event.turn == "a":
                    await asyncio.to_thread(server.call, relay.cut)
                    await asyncio.sleep(0.5)  # the stream ends; its reconnects fail a while
                    await asyncio.to_thread(server.call, relay.restore)
                    await client.send("s", "again", id="b")
                if event.kind == "turn_ended" and event.turn == "b":
                    break
    assert "unavailable" not in kinds  # a reconnect, not an event
    assert ids == list(range(1, len(ids) + 1))  # every durable event once, in order
