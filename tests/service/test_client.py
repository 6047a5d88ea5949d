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
    TooMany,
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


async def test_the_lifecycle_verbs_conditions_and_bounds(tmp_path: Path) -> None:
    """Every verb of the API beyond send and steer, through a real serve process.

    The turn's two tool calls wait on gates the test opens, so the sends queue behind a
    turn that is certainly still running (with a timed tool, a loaded machine let the turn
    end first and the first send started a turn of its own).
    """
    gate = tmp_path / "gate"
    served = Served(
        f"sqlite:///{tmp_path / 'l.db'}",
        "--poll",
        "0.1",
        "--max-waiting",
        "4",  # the steer waits for the turn's next step, and three sends behind it
        "--agent",
        "tests.service.gated_agent:two_gated_calls",
        log=tmp_path / "serve.log",
        env={"STEERABLE_TEST_GATE": str(gate)},
    ).start()
    try:
        async with Client(served.url) as client:
            first = await client.send("s", "plan", id="p", metadata={"who": "ana"}, if_idle=True)
            assert (first.state, first.ahead) == ("started", 0)
            with pytest.raises(Conflict) as busy:
                await client.send("s", "again", if_idle=True)
            assert busy.value.code == "session_not_idle"
            with pytest.raises(Conflict) as other:
                await client.steer("s", "x", expected_turn="not-this-one")
            assert other.value.code == "turn_mismatch"
            for _ in range(600):  # until its first step is done: now the first call waits
                if ((await client.status("s"))["turn"] or {}).get("steps"):
                    break
                await asyncio.sleep(0.05)
            assert (await client.steer("s", "skip friday", id="st")).turn == "p"
            queued = [await client.send("s", f"q{i}", id=f"q{i}") for i in range(3)]
            assert [q.state for q in queued] == ["queued"] * 3
            with pytest.raises(TooMany) as full:
                await client.send("s", "one too many")
            assert full.value.code == "queue_full" and (full.value.retry_after or 0) >= 1
            assert (await client.cancel("s", "q2"))["state"] == "cancelled"
            with pytest.raises(Conflict) as answered:
                await client.cancel("s", "p")
            assert answered.value.code == "input_not_waiting"
            await asyncio.to_thread(Path(f"{gate}.1").touch)  # the next step takes the steer
            steered = await client.steer("s", "skip friday", id="st", wait=30)
            assert steered.turn == "p" and steered.fate is not None
            assert steered.fate["state"] == "taken" and steered.fate["turn"] == "p"
            assert (await client.input("s", "p"))["metadata"] == {"who": "ana"}
            await client.set_metadata("s", {"title": "Week"})
            assert (await client.status("s"))["metadata"] == {"title": "Week"}
            waiting = await client.inputs("s", state="waiting")
            assert [i["id"] for i in waiting["inputs"]] == ["q0", "q1"]
            with pytest.raises(Conflict) as running:
                await client.delete("s")
            assert running.value.code == "session_busy"
            await asyncio.to_thread(Path(f"{gate}.2").touch)
            for turn in ("p", "q0", "q1"):
                await client.turn("s", turn, wait=30)
            turns = await client.turns("s")
            assert [t["id"] for t in turns["turns"]] == ["p", "q0", "q1"]
            await client.delete("s")
            with pytest.raises(NotFound):
                await client.status("s")
    finally:
        served.kill()


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
