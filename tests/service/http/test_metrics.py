"""``create_app(metrics=True)``: ``/metrics`` counts what the views show, and names no tenant.

A real server (uvicorn on loopback, memory and SQLite) runs a scripted agent through every
way a turn ends and both fates of a steer; the scrape must equal what the turns, inputs and
transcripts say. The store the service is given is timed through a proxy that must answer
every ``isinstance`` as the store does. Every answer carries an ``X-Request-Id``, and the log
lines written for a request carry it as ``request_id``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from steerable._logs import RequestIdFilter
from steerable.errors import StoreUnavailable
from steerable.models.base import ModelRequest
from steerable.models.scripted import ScriptedModel, call
from steerable.service import Service
from steerable.service.agent import ReActAgent
from steerable.service.http import create_app
from steerable.service.http._metrics import timed_store
from steerable.service_store import END_STATES, Notifying, ServiceStore, Status
from steerable.spec import Spec
from steerable.store import Forkable, Journaling, Repairable, Rewritable, Store, journaling
from steerable.stores.memory import MemoryStore
from steerable.stores.sqlite import SQLiteStore
from steerable.tools import Tool, tool
from tests.service.http.conftest import Build, LiveServer, app_over
from tests.service.http.test_api import ended, is_problem

TENANT = "tenant-zq"
AUTH = {"Authorization": "Bearer t0ken-zq"}
SIDS = ("sid-zq1", "sid-zq2", "sid-zq3", "sid-zq4")  # "zq": no label or value may hold it


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(text: str) -> Samples:
    """Each sample of an exposition: (name, labels) -> value."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(found: Samples, name: str, **labels: str) -> float:
    """One sample's value (0 when the series is not there)."""
    return found.get((name, frozenset(labels.items())), 0.0)


class Gate:
    """Holds the ``hold`` tool until the test lets it go; thread-safe (the server's loop
    runs the tool, the test's loop opens the gate)."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()

    def tool(self) -> Tool:
        gate = self

        @tool(side_effects=True)  # journaled: the replica's core store verbs are called
        async def hold() -> str:
            """Wait until the test lets go."""
            gate.started.set()
            while not gate.release.is_set():  # noqa: ASYNC110 - set from another thread
                await asyncio.sleep(0.01)
            return "let go"

        return hold

    async def wait_started(self) -> None:
        assert await asyncio.to_thread(self.started.wait, 30), "the tool never started"

    def reset(self) -> None:
        self.started.clear()
        self.release.clear()


def broken(request: ModelRequest) -> str:
    """A model request that fails: the turn is ``failed``."""
    raise RuntimeError("the model broke")


async def scrape(http: httpx.AsyncClient) -> tuple[str, Samples]:
    answer = await http.get("/metrics")  # no token: the gate covers /v1/ only
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    return answer.text, samples(answer.text)


async def test_metrics_equal_what_the_turns_inputs_and_transcripts_say(
    serve_app: Callable[[Build], LiveServer], store_url: str
) -> None:
    gate = Gate()
    script: list[Any] = [
        "first answer",  # a
        call("hold"),  # b: held while the steer and two sends come
        "b answered",  # b, after its step took the steer
        "q1 answer",
        "q2 answer",
        "own answer",  # the steer sent to an idle session: a turn of its own
        broken,  # f: failed
        call("hold"),  # x: stopped while held
    ]
    agent = ReActAgent(Spec(tools=[gate.tool()], max_steps=6), ScriptedModel(script))
    build = app_over(store_url, agent=agent, tokens={"t0ken-zq": TENANT}, metrics=True)
    server = serve_app(build)
    s1, s2, s3, s4 = SIDS
    async with httpx.AsyncClient(base_url=server.url, timeout=30, headers=AUTH) as http:

        async def send(sid: str, id: str) -> None:
            sent = await http.post(f"/v1/sessions/{sid}/messages", json={"text": id, "id": id})
            assert sent.status_code == 202, sent.text

        await send(s1, "a")
        await ended(http, s1, "a")
        await send(s1, "b")
        await gate.wait_started()
        steered = await http.post(f"/v1/sessions/{s1}/steers", json={"text": "st", "id": "st"})
        assert steered.json()["turn"] == "b"  # offered to the running turn
        await send(s1, "q1")
        await send(s1, "q2")
        async with http.stream("GET", f"/v1/sessions/{s1}/events") as stream:
            assert stream.status_code == 200
            _, during = await scrape(http)
        assert value(during, "steerable_queue_depth") == 2  # q1, q2 wait to be turns
        assert value(during, "steerable_running_turns") == 1
        assert value(during, "steerable_sse_streams") == 1
        gate.release.set()
        await ended(http, s1, "q2")
        own = await http.post(f"/v1/sessions/{s2}/steers", json={"text": "own", "id": "own"})
        assert own.json()["turn"] is None  # nothing runs there: a turn of its own
        await ended(http, s2, "own")
        await send(s3, "f")
        assert (await ended(http, s3, "f"))["state"] == "failed"
        gate.reset()
        await send(s4, "x")
        await gate.wait_started()
        assert (await http.post(f"/v1/sessions/{s4}/stop")).json() == {"turn": "x"}
        assert (await ended(http, s4, "x"))["state"] == "stopped"
        assert (await http.get("/no/such/route/zq")).status_code == 404

        turns: list[dict[str, Any]] = []
        inputs: list[dict[str, Any]] = []
        messages: list[dict[str, Any]] = []
        for sid in SIDS:
            turns += (await http.get(f"/v1/sessions/{sid}/turns")).json()["turns"]
            inputs += (await http.get(f"/v1/sessions/{sid}/inputs")).json()["inputs"]
            messages += (await http.get(f"/v1/sessions/{sid}/transcript")).json()["messages"]
        text, found = await scrape(http)

    states = Counter(t["state"] for t in turns)
    assert states == {"completed": 5, "failed": 1, "stopped": 1}
    for state in END_STATES:
        assert value(found, "steerable_turns_ended_total", state=state) == states[state], state
    steered_messages = sum(1 for m in messages if m["steered"])
    assert steered_messages == 1
    assert value(found, "steerable_steers_total", fate="taken") == steered_messages
    assert value(found, "steerable_steer_wait_seconds_count") == steered_messages
    own_turns = sum(1 for i in inputs if i["kind"] == "steer" and i["state"] == "turn")
    assert own_turns == 1
    assert value(found, "steerable_steers_total", fate="own_turn") == own_turns
    assert value(found, "steerable_claims_total", kind="fresh") == len(turns)
    assert value(found, "steerable_claims_total", kind="takeover") == 0
    assert value(found, "steerable_turn_seconds_count") == len(turns)
    assert value(found, "steerable_turn_steps_count") == len(turns)
    assert value(found, "steerable_fenced_total") == 0
    assert value(found, "steerable_queue_depth") == 0
    assert value(found, "steerable_running_turns") == 0
    assert value(found, "steerable_sse_streams") == 0

    sends = len([i for i in inputs if i["kind"] == "send"])
    messages_route = {"route": "/v1/sessions/{sid}/messages", "method": "POST"}
    assert value(found, "steerable_http_requests_total", **messages_route, status="202") == sends
    steers = {"route": "/v1/sessions/{sid}/steers", "method": "POST", "status": "202"}
    assert value(found, "steerable_http_requests_total", **steers) == 2
    unknown = {"route": "unmatched", "method": "GET", "status": "404"}
    assert value(found, "steerable_http_requests_total", **unknown) == 1
    store = "MemoryStore" if store_url == "memory:" else "SQLiteStore"
    timed = "steerable_store_call_seconds_count"
    assert value(found, timed, store=store, verb="enqueue") == len(inputs)  # one call each
    assert value(found, timed, store=store, verb="claim") >= len(turns)
    assert value(found, timed, store=store, verb="step") >= 1
    assert value(found, timed, store=store, verb="end_turn") == len(turns)
    assert value(found, timed, store=store, verb="begin_calls") == 2  # b's hold, and x's
    assert "zq" not in text  # no session id, no tenant, no path a caller wrote


async def test_without_the_setting_there_is_no_metrics_route() -> None:
    app = create_app(Service(MemoryStore()))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://api"
    ) as http:
        is_problem(await http.get("/metrics"), 404, "not_found")
        schema = (await http.get("/openapi.json")).json()
    assert "/metrics" not in schema["paths"]


async def test_each_app_counts_in_a_registry_of_its_own() -> None:
    apps = [create_app(Service(MemoryStore()), metrics=True) for _ in range(2)]
    texts = []
    for number, app in enumerate(apps):
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://api"
        ) as http:
            for _ in range(number + 1):
                assert (await http.get("/healthz")).status_code == 200
            texts.append((await http.get("/metrics")).text)
    health = {"route": "/healthz", "method": "GET", "status": "200"}
    counted = [value(samples(t), "steerable_http_requests_total", **health) for t in texts]
    assert counted == [1, 2]
    assert "/metrics" not in (await _schema(apps[0]))["paths"]


async def _schema(app: Any) -> dict[str, Any]:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://api"
    ) as http:
        schema: dict[str, Any] = (await http.get("/openapi.json")).json()
        return schema


def test_metrics_are_set_up_before_the_service_serves() -> None:
    from steerable.errors import UsageError

    service = Service(MemoryStore())
    service.replica = object()  # type: ignore[assignment]  # as if it served already
    with pytest.raises(UsageError, match="before the service serves"):
        create_app(service, metrics=True)
    with pytest.raises(UsageError, match="True or False"):
        create_app(Service(MemoryStore()), metrics="yes")  # type: ignore[arg-type]


# -- the timed store ----------------------------------------------------------------------------

ABILITIES = (Store, ServiceStore, Notifying, Rewritable, Forkable, Journaling, Repairable)


def _forwarded(name: str) -> Any:
    async def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        return await getattr(self.inner, name)(*args, **kwargs)

    return call


def _plain_init(self: Any) -> None:
    self.inner = MemoryStore()


# A store with the transcript and the service's tables, and none of the optional abilities.
Plain: Any = type(
    "Plain",
    (),
    {
        "__init__": _plain_init,
        **{
            name: _forwarded(name)
            for protocol in (Store, ServiceStore)
            for name, member in vars(protocol).items()
            if not name.startswith("_") and callable(member)
        },
    },
)


@pytest.mark.parametrize("make", [MemoryStore, Plain, lambda: SQLiteStore(":memory:")])
async def test_a_timed_store_answers_every_isinstance_as_its_store(make: Any) -> None:
    from prometheus_client import CollectorRegistry, Histogram

    registry = CollectorRegistry()
    seconds = Histogram("t", "t", ["store", "verb"], registry=registry)
    store = make()
    timed = timed_store(store, seconds)
    for ability in ABILITIES:
        assert isinstance(timed, ability) == isinstance(store, ability), ability.__name__
    assert type(timed).__name__ == type(store).__name__
    if isinstance(store, Journaling):
        assert journaling(timed) is timed
    await timed.status("s")
    labels = {"store": type(store).__name__, "verb": "status"}
    assert registry.get_sample_value("t_count", labels) == 1  # timed
    assert isinstance(Plain(), ServiceStore) and not isinstance(Plain(), Forkable)  # as it says


# -- request ids --------------------------------------------------------------------------------


class BrokenStore(MemoryStore):
    """A store whose status fails: unavailable for one session, a bug for another."""

    async def status(self, session: str, *, limit: int = 100) -> Status:
        if session.endswith("/away"):
            raise StoreUnavailable("the test took the store away")
        if session.endswith("/bug"):
            raise RuntimeError("a bug of the test's")
        return await super().status(session, limit=limit)


@pytest.fixture
def request_ids(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """The log, with each record's request id (as ``steerable serve``'s handler has it)."""
    caplog.handler.addFilter(RequestIdFilter())
    caplog.set_level(logging.INFO, logger="steerable")
    return caplog


async def test_every_answer_has_a_request_id_and_its_log_lines_carry_it(
    request_ids: pytest.LogCaptureFixture,
) -> None:
    app = create_app(Service(BrokenStore()), tokens={"t0ken-zq": TENANT}, metrics=True)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as http:
        kept = await http.get("/v1/sessions/s", headers={**AUTH, "X-Request-Id": "abc-1.Z_"})
        assert kept.headers["x-request-id"] == "abc-1.Z_"
        for bad in ("x" * 129, "has space", "semi;colon", ""):
            answer = await http.get("/healthz", headers={"X-Request-Id": bad})
            made = answer.headers["x-request-id"]
            assert made != bad and len(made) == 32, made
        ids = set()
        for answer in (
            await http.get("/v1/sessions/s"),  # 401 at the gate
            await http.get("/nowhere"),  # 404
            await http.get("/v1/sessions/s/", headers=AUTH),  # 307 to the path without /
            await http.get("/v1/sessions/s", headers=AUTH, params={"limt": 5}),  # 422
            await http.get("/metrics"),
        ):
            ids.add(answer.headers["x-request-id"])
        assert len(ids) == 5  # a new one each
        away = await http.get("/v1/sessions/away", headers=AUTH)
        is_problem(away, 503, "store_unavailable")
        bug = await http.get("/v1/sessions/bug", headers=AUTH)
        is_problem(bug, 500, "internal_error")
    by_message = {r.getMessage(): r for r in request_ids.records}
    unavailable = by_message["the store is unavailable: the test took the store away"]
    assert getattr(unavailable, "request_id", None) == away.headers["x-request-id"]
    unexpected = by_message["unexpected error on /v1/sessions/bug"]
    assert getattr(unexpected, "request_id", None) == bug.headers["x-request-id"]
