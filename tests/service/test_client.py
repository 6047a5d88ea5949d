"""``steerable.service.client`` against a real ``steerable serve`` behind a relay that drops.

The relay (:class:`tests.stores.relay.Relay`) sits between the client and the server. It
drops the answers of chosen POSTs after the server has handled them (the input is stored,
the client never hears so), and cuts every connection while an event stream is read. The
client's retries carry the same input id, so the server keeps one input each; its event
stream reconnects with ``Last-Event-ID``, so it yields every durable event once, in order.
What the server holds is read straight from it, past the relay.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from steerable.errors import UsageError
from steerable.service.client import (
    Client,
    Conflict,
    Event,
    NotFound,
    ServiceError,
    Unauthorized,
)
from tests.cli.test_serve import Served
from tests.stores.relay import Reader, Relay, Writer

pytestmark = pytest.mark.slow


class DroppingRelay(Relay):
    """A relay that can drop the answer of the next ``drop_answers`` POSTs, and count it."""

    def __init__(self, host: str, upstream: int) -> None:
        super().__init__(host, upstream)
        self.drop_answers = 0
        self.dropped = 0
        self._posting: set[Writer] = set()  # the lines whose request now is a POST

    async def _up(self, reader: Reader, server: Writer, client: Writer) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                if data.startswith(b"POST "):
                    self._posting.add(client)
                server.write(data)
                await server.drain()

    async def _down(self, reader: Reader, client: Writer, server: Writer) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                if client in self._posting:
                    self._posting.discard(client)
                    if self.drop_answers > 0:  # handled by the server, never heard of
                        self.drop_answers -= 1
                        self.dropped += 1
                        client.transport.abort()
                        server.transport.abort()
                        return
                client.write(data)
                await client.drain()

    def _ended(self, client: Writer) -> None:
        self._posting.discard(client)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Served]:
    """One ``steerable serve`` over SQLite with the demo agent (a 0.5 s tool per turn)."""
    served = Served(
        f"sqlite:///{tmp_path / 's.db'}", "--poll", "0.1", log=tmp_path / "serve.log"
    ).start()
    try:
        yield served
    finally:
        served.kill()


@pytest.fixture
async def relay(server: Served) -> AsyncIterator[DroppingRelay]:
    line = DroppingRelay("127.0.0.1", server.port)
    await line.restore()
    try:
        yield line
    finally:
        await line.cut()


async def _all_events(client: Client, session: str) -> list[Event]:
    """Every durable event of ``session``, read straight from the server."""
    last = await client.last_event(session)
    seen: list[Event] = []
    if last == 0:
        return seen
    async for event in client.events(session, after=0):
        if event.id is not None:
            seen.append(event)
            if event.id >= last:
                return seen
    raise AssertionError("unreachable: events() never ends by itself")


async def test_a_post_whose_answer_was_lost_is_retried_as_the_same_input(
    server: Served, relay: DroppingRelay
) -> None:
    sent: list[str] = []
    async with Client(f"http://127.0.0.1:{relay.port}", retries=3, backoff=0.01) as client:
        for n in range(4):
            relay.drop_answers = 1  # the first try's answer is lost; the retry's is heard
            accepted = await client.send("s1", f"send {n}", id=f"send-{n}")
            assert accepted.id == f"send-{n}"
            sent.append(accepted.id)
            relay.drop_answers = 1
            steered = await client.steer("s1", f"steer {n}")  # the client makes the id
            sent.append(steered.id)
        relay.drop_answers = 1
        await client.stop("s1")  # retried too: a stop is idempotent
    assert relay.dropped == 9  # every call lost its first answer
    async with Client(server.url) as direct:
        inputs = [e for e in await _all_events(direct, "s1") if e.kind == "input"]
        assert [e.data["id"] for e in inputs] == sent  # each once, in the order sent
        for id in sent:
            assert (await direct.input("s1", id))["id"] == id


async def test_a_post_that_keeps_failing_raises_our_error_and_stores_it_once(
    server: Served, relay: DroppingRelay
) -> None:
    async with Client(f"http://127.0.0.1:{relay.port}", retries=2, backoff=0.01) as client:
        relay.drop_answers = 3  # the first try and both retries
        with pytest.raises(ServiceError) as raised:
            await client.send("s2", "hello", id="only")
        assert (raised.value.status, raised.value.code) == (None, "unreachable")
        again = await client.send("s2", "hello", id="only")  # later: the same input
        assert again.id == "only"
    async with Client(server.url) as direct:
        inputs = [e for e in await _all_events(direct, "s2") if e.kind == "input"]
        assert [e.data["id"] for e in inputs] == ["only"]


async def test_the_event_stream_resumes_after_every_drop_missing_and_repeating_nothing(
    server: Served, relay: DroppingRelay
) -> None:
    turns = [f"turn-{n}" for n in range(5)]
    seen: list[Event] = []
    ended: set[str] = set()
    drops = 0

    async def follow() -> None:
        nonlocal drops
        async with Client(f"http://127.0.0.1:{relay.port}", backoff=0.01) as client:
            async for event in client.events("s3", after=0):
                if event.id is None:
                    continue  # a live delta: never replayed, not counted
                seen.append(event)
                if event.kind == "turn_ended" and event.turn is not None:
                    ended.add(event.turn)
                    if ended >= set(turns):
                        return
                if event.id % 3 == 0:  # cut the line under the stream, again and again
                    relay.drop()
                    drops += 1

    async with Client(server.url) as direct:
        await direct.send("s3", "first", id=turns[0])  # the session exists: its stream too
        following = asyncio.create_task(follow())
        for id in turns[1:]:
            await direct.send("s3", f"then {id}", id=id)
        await asyncio.wait_for(following, 60)
        everything = await _all_events(direct, "s3")
    assert drops >= 5
    assert [e.id for e in seen] == list(range(1, len(seen) + 1))  # once each, in order
    assert [(e.id, e.kind, e.turn, e.data) for e in seen] == [
        (e.id, e.kind, e.turn, e.data) for e in everything[: len(seen)]
    ]


async def test_problems_are_exceptions_of_our_tree(server: Served) -> None:
    async with Client(server.url) as client:
        with pytest.raises(NotFound) as missing:
            await client.status("nobody")
        assert (missing.value.status, missing.value.code) == (404, "session_not_found")
        with pytest.raises(NotFound):
            await client.transcript("nobody")
        with pytest.raises(NotFound):
            await client.last_event("nobody")
        await client.send("s4", "hello", id="x1")
        with pytest.raises(Conflict) as conflict:
            await client.send("s4", "another text", id="x1")
        assert conflict.value.code == "idempotency_conflict"
        with pytest.raises(NotFound) as no_turn:
            await client.turn("s4", "no-such-turn")
        assert no_turn.value.code == "turn_not_found"
        with pytest.raises(ServiceError) as invalid:
            await client.send("s4", "hello", id="\x00")
        assert (invalid.value.status, invalid.value.code) == (422, "invalid_request")
        done = await client.turn("s4", "x1", wait=30)
        assert (done["state"], done["output"]) == ("completed", "answered: hello")
        page = await client.sessions()
        assert [s["session"] for s in page["sessions"]] == ["s4"]
    async with Client(server.url, token="nobody-asked-for-one") as anyone:
        await anyone.status("s4")  # a server without tokens ignores one
    assert issubclass(Unauthorized, ServiceError)


async def test_a_stream_resumed_beyond_the_last_event_is_told_to_refetch(server: Served) -> None:
    async with Client(server.url) as client:
        await client.send("s5", "hello", id="r1")
        await client.turn("s5", "r1", wait=30)
        last = await client.last_event("s5")
        assert last > 0
        async with contextlib.aclosing(client.events("s5", after=last + 100)) as stream:
            first = await anext(stream)
            assert (first.kind, first.data) == ("refetch", {"last": last})
            await client.send("s5", "again", id="r2")
            following = await anext(stream)
        assert (following.id, following.kind, following.data["id"]) == (last + 1, "input", "r2")


@pytest.mark.parametrize("token", ["t\u00e9", "a b", "", "tab\there"])
def test_a_token_no_header_can_carry_is_a_usage_error(token: str) -> None:
    with pytest.raises(UsageError, match="printable ASCII"):
        Client("http://127.0.0.1:9", token=token)


@pytest.mark.parametrize("session", ["a/b", ".", "..", ""])
async def test_a_session_id_the_api_cannot_route_is_a_usage_error(session: str) -> None:
    async with Client("http://127.0.0.1:9") as client:
        with pytest.raises(UsageError, match="a session id is"):
            await client.status(session)
        with pytest.raises(UsageError, match="a session id is"):
            await client.send(session, "hello")
