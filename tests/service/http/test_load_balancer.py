"""Three ``steerable serve`` replicas over one Postgres database, behind nginx (round robin).

Every request goes through nginx, which names the replica that answered in a header
(:data:`~tests.service.http.nginx.UPSTREAM`): consecutive requests reach different
replicas. A send, a steer through another replica (taken at the turn's next step) and a
stop through a third; an event stream on one replica sees a turn another one runs, and a
reconnect with ``Last-Event-ID`` to yet another misses nothing and repeats nothing; a
replica SIGKILLed mid-turn has its turn carried on by another once its lease runs out,
and the stream, cut with the dead replica, goes on through nginx from where it was.

The agent (:func:`held_agent`) makes two ``work`` calls a turn, then answers with every
user message of the turn; ``work`` notes each call in a file and waits while the test's
hold file exists, so "during a tool call" is a certainty, not a race with a timer. The
leases are short, so the whole module takes well under a minute. nginx comes from the
system (Debian's ``nginx``): without it the tests skip, or fail when
``STEERABLE_REQUIRE_SERVERS=1``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from steerable import Spec, Tool, tool
from steerable.service import ReActAgent
from steerable.service.demo import DemoModel
from tests.cli.test_serve import Served, cli, empty_postgres
from tests.service.http.nginx import UPSTREAM, Nginx, nginx_binary
from tests.service.replicas import until

__all__ = ["empty_postgres"]  # a fixture, used by name

pytestmark = pytest.mark.slow

LEASE = 2.0
AGENT = "tests.service.http.test_load_balancer:held_agent"
GUARD = 40.0  # a hang guard for a stream: far above what any turn here takes


def _held_work() -> Tool:
    async def work(step: int) -> str:
        """Do one step of work: note the call, then wait while the hold file exists."""
        where = Path(os.environ["STEERABLE_TEST_HOLD"])
        await asyncio.to_thread(_note, where / "calls", step)
        for _ in range(1200):  # a minute at most, so a broken test cannot hang here
            if not await asyncio.to_thread((where / "hold").exists):
                return f"step {step} done"
            await asyncio.sleep(0.05)
        return "the hold was never released"

    return tool(work)


def _note(path: Path, step: int) -> None:
    with path.open("a", encoding="utf-8") as file:
        file.write(f"{step}\n")


def held_agent() -> ReActAgent:
    """The replicas' agent (``--agent``): two held ``work`` calls a turn, then the answer."""
    return ReActAgent(Spec(tools=[_held_work()], max_steps=6), DemoModel(calls=2))


@dataclass(frozen=True)
class Hold:
    """The test's side of the agent's tool: hold it, release it, count its calls."""

    where: Path

    def hold(self) -> None:
        """Tool calls from now on wait (those waiting go on waiting)."""
        (self.where / "hold").touch()

    def release(self) -> None:
        """Every waiting tool call returns."""
        (self.where / "hold").unlink(missing_ok=True)

    def calls(self) -> int:
        """How many tool calls began, on every replica."""
        path = self.where / "calls"
        return len(path.read_text(encoding="utf-8").split()) if path.exists() else 0

    async def until_calls(self, count: int) -> None:
        """Wait until ``count`` tool calls began."""

        async def enough() -> bool:
            return self.calls() >= count

        await until(enough, f"{count} tool calls")


@dataclass
class Cluster:
    """The replicas (by name, with their ports) and the balancer in front of them."""

    replicas: dict[str, Served]
    nginx: Nginx
    http: httpx.AsyncClient
    tool: Hold

    def name_of(self, upstream: str) -> str:
        """The replica behind an upstream address ``127.0.0.1:PORT``."""
        port = int(upstream.rsplit(":", 1)[1])
        return next(n for n, s in self.replicas.items() if s.port == port)

    async def aim(self, avoid: set[str]) -> None:
        """Make the balancer's next pick a replica not in ``avoid``: round robin goes in
        the config's order, so pass over the others with health checks."""
        names = list(self.replicas)
        for _ in range(2 * len(names)):
            answer = await self.http.get("/healthz")
            assert answer.status_code == 200
            last = names.index(self.name_of(answer.headers[UPSTREAM]))
            if names[(last + 1) % len(names)] not in avoid:
                return
        raise AssertionError(f"the balancer never came round to a replica outside {avoid}")

    async def post(self, path: str, body: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """POST through nginx: the answer and the replica that gave it."""
        answer = await self.http.post(path, json=body)
        assert answer.status_code == 202, answer.text
        payload: dict[str, Any] = answer.json()
        return payload, self.name_of(answer.headers[UPSTREAM])

    async def status(self, session: str) -> dict[str, Any]:
        """The session's status, through nginx."""
        answer = await self.http.get(f"/v1/sessions/{session}")
        assert answer.status_code == 200, answer.text
        payload: dict[str, Any] = answer.json()
        return payload

    async def holder(self, session: str) -> str:
        """The replica holding the session's running turn (waits for a claim)."""
        found: list[str] = []

        async def claimed() -> bool:
            turn = (await self.status(session))["turn"]
            if turn is not None and turn["holder"] is not None:
                found.append(turn["holder"])
            return bool(found)

        await until(claimed, f"a replica claims the turn of {session}")
        return found[-1]


@dataclass(frozen=True)
class Frame:
    """One SSE event: its id (None for deltas), its kind, its data."""

    id: int | None
    event: str
    data: dict[str, Any]


@asynccontextmanager
async def stream(
    cluster: Cluster, session: str, last: int | None = None
) -> AsyncIterator[tuple[str, AsyncIterator[Frame]]]:
    """The session's event stream through nginx: the replica serving it, and its frames."""
    headers = {"Accept": "text/event-stream"}
    if last is not None:
        headers["Last-Event-ID"] = str(last)
    url = f"/v1/sessions/{session}/events"
    async with cluster.http.stream("GET", url, headers=headers) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        yield cluster.name_of(response.headers[UPSTREAM]), _frames(response)


async def _frames(response: httpx.Response) -> AsyncIterator[Frame]:
    fields: dict[str, str] = {}
    async for line in response.aiter_lines():
        if line.startswith(":"):
            continue  # a keep-alive
        if line:
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")
            continue
        if "data" in fields:
            id = int(fields["id"]) if "id" in fields else None
            yield Frame(id, fields.get("event", "message"), json.loads(fields["data"]))
        fields = {}


async def durable_until(
    frames: AsyncIterator[Frame], seen: list[Frame], stop: str, turn: str
) -> None:
    """Append the durable events to ``seen`` until the ``stop`` event of ``turn``."""
    async with asyncio.timeout(GUARD):
        async for frame in frames:
            if frame.id is None:
                continue  # a live delta: never replayed, not counted
            seen.append(frame)
            if frame.event == stop and frame.data["turn"] == turn:
                return
    raise AssertionError(f"the stream ended before {stop} of {turn}")


async def drain(frames: AsyncIterator[Frame], seen: list[Frame]) -> None:
    """Append the durable events to ``seen`` until the stream ends (or fails)."""
    async with asyncio.timeout(GUARD):
        async for frame in frames:
            if frame.id is not None:
                seen.append(frame)


def consecutive(frames: list[Frame]) -> list[int]:
    """The ids, checked to be 1, 2, 3, ... with no gap and no repeat."""
    ids = [f.id for f in frames if f.id is not None]
    assert ids == list(range(1, len(ids) + 1)), ids
    return ids


@pytest.fixture
def nginx_path() -> str:
    """The nginx executable; skip (or fail in CI) without one."""
    found = nginx_binary()
    if found is None:
        reason = "nginx is not installed (Debian: apt-get install nginx)"
        if os.environ.get("STEERABLE_REQUIRE_SERVERS") == "1":
            pytest.fail(f"{reason} (STEERABLE_REQUIRE_SERVERS=1)", pytrace=False)
        pytest.skip(reason)
    return found


@pytest.fixture
async def cluster(empty_postgres: str, nginx_path: str, tmp_path: Path) -> AsyncIterator[Cluster]:
    """Three replicas (r0, r1, r2) over a freshly migrated database, behind nginx."""
    done = await asyncio.to_thread(cli, "migrate", "--store", empty_postgres)
    assert done.returncode == 0, done.stderr
    flags = ["--agent", AGENT, "--lease", str(LEASE), "--poll", "0.2"]
    tool = Hold(tmp_path)
    env = {"STEERABLE_TEST_HOLD": str(tmp_path)}
    replicas = {
        name: Served(
            empty_postgres, *flags, "--replica-id", name, log=tmp_path / f"{name}.log", env=env
        )
        for name in ("r0", "r1", "r2")
    }
    nginx: Nginx | None = None
    try:
        await asyncio.gather(*(asyncio.to_thread(s.start) for s in replicas.values()))
        ports = [s.port for s in replicas.values()]
        nginx = await asyncio.to_thread(Nginx(ports, tmp_path / "nginx", binary=nginx_path).start)
        async with httpx.AsyncClient(base_url=nginx.url, timeout=30) as http:
            yield Cluster(replicas, nginx, http, tool)
    finally:
        if nginx is not None:
            await asyncio.to_thread(nginx.stop)
        for server in replicas.values():
            await asyncio.to_thread(server.kill, signal.SIGKILL)


async def test_send_steer_stop_and_streams_across_three_replicas(cluster: Cluster) -> None:
    # Round robin: consecutive requests reach different replicas.
    answers = [await cluster.http.get("/healthz") for _ in cluster.replicas]
    assert {cluster.name_of(a.headers[UPSTREAM]) for a in answers} == set(cluster.replicas)

    # A send; then, while the turn's first tool call runs, a steer through another replica.
    cluster.tool.hold()
    sent, sent_by = await cluster.post("/v1/sessions/trip/messages", {"text": "plan my week"})
    assert sent["state"] == "started"
    turn = sent["turn"]
    await cluster.tool.until_calls(1)
    holder = await cluster.holder("trip")
    await cluster.aim(avoid={sent_by})
    steer, steered_by = await cluster.post("/v1/sessions/trip/steers", {"text": "skip friday"})
    assert steered_by != sent_by
    assert steer["turn"] == turn  # offered to the running turn

    # A stream on a replica that does not run the turn sees it run.
    await cluster.aim(avoid={holder})
    first: list[Frame] = []
    async with stream(cluster, "trip") as (watcher, frames):
        assert watcher != holder
        cluster.tool.release()
        await durable_until(frames, first, "steers_taken", turn)
    # Reconnect with Last-Event-ID, through a replica the first stream was not on.
    await cluster.aim(avoid={watcher})
    rest: list[Frame] = []
    async with stream(cluster, "trip", last=first[-1].id) as (again, frames):
        assert again != watcher
        await durable_until(frames, rest, "turn_ended", turn)
    ids = consecutive(first + rest)  # nothing missed, nothing repeated
    whole: list[Frame] = []
    async with stream(cluster, "trip") as (_, frames):  # the whole story, read again
        await durable_until(frames, whole, "turn_ended", turn)
    assert [f.id for f in whole] == ids
    assert whole == first + rest

    # The steer came during step 1's tool call: taken at step 2, and answered.
    view = (await cluster.http.get(f"/v1/sessions/trip/inputs/{steer['id']}")).json()
    assert (view["state"], view["turn"], view["step"]) == ("taken", turn, 2)
    done = (await cluster.http.get(f"/v1/sessions/trip/turns/{turn}")).json()
    assert done["state"] == "completed"
    assert "answered: plan my week | skip friday" in done["output"]

    # A stop through a third replica (neither the send's nor the steer's) ends a turn
    # in the middle of a tool call.
    cluster.tool.hold()
    calls = cluster.tool.calls()
    again_sent, _ = await cluster.post("/v1/sessions/trip/messages", {"text": "and next week"})
    second = again_sent["turn"]
    await cluster.tool.until_calls(calls + 1)
    await cluster.aim(avoid={sent_by, steered_by})
    stopped, stopped_by = await cluster.post("/v1/sessions/trip/stop", {})
    assert stopped_by not in {sent_by, steered_by}
    assert stopped["turn"] == second
    ended = await cluster.http.get(f"/v1/sessions/trip/turns/{second}", params={"wait": 30})
    assert ended.json()["state"] == "stopped"


async def test_a_replica_killed_mid_turn_its_turn_and_stream_go_on(cluster: Cluster) -> None:
    cluster.tool.hold()
    sent, _ = await cluster.post("/v1/sessions/crash/messages", {"text": "survive this"})
    turn = sent["turn"]
    await cluster.tool.until_calls(1)  # the holder is in the turn's first tool call
    holder = await cluster.holder("crash")
    # Open the stream on the holder itself: it is cut when the holder dies.
    await cluster.aim(avoid={n for n in cluster.replicas if n != holder})
    seen: list[Frame] = []
    async with stream(cluster, "crash") as (on, frames):
        assert on == holder
        await durable_until(frames, seen, "turn_started", turn)
        cluster.replicas[holder].kill(signal.SIGKILL)
        with pytest.raises(httpx.TransportError):
            await drain(frames, seen)
    # Reconnect through nginx from the last event seen: a live replica answers, the turn
    # is taken over once the lease runs out and runs its tool call again.
    async with stream(cluster, "crash", last=seen[-1].id) as (on, frames):
        assert on != holder
        await durable_until(frames, seen, "turn_started", turn)
        await cluster.tool.until_calls(2)
        cluster.tool.release()
        await durable_until(frames, seen, "turn_ended", turn)
    consecutive(seen)
    started = [f.data["data"] for f in seen if f.event == "turn_started"]
    assert started[0] == {"epoch": started[0]["epoch"], "holder": holder, "resumed": False}
    assert started[-1]["resumed"] and started[-1]["holder"] != holder
    done = (await cluster.http.get(f"/v1/sessions/crash/turns/{turn}")).json()
    assert done["state"] == "completed"
    assert "answered: survive this" in done["output"]
    # nginx has marked the dead replica failed: every request goes to a live one.
    for _ in range(6):
        answer = await cluster.http.get("/v1/sessions/crash")
        assert answer.status_code == 200
        assert cluster.name_of(answer.headers[UPSTREAM]) != holder
