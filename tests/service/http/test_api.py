"""The HTTP API against a real server (uvicorn, loopback) over memory and SQLite.

Every route's answer and fields, idempotency, the problems of bad input (always 4xx with a
problem body, never 5xx), readiness, and the OpenAPI schema.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from steerable.errors import StoreUnavailable
from steerable.service import Service
from steerable.service._service import MAX_TEXT
from steerable.service.demo import demo_agent
from steerable.service.http import create_app
from steerable.service_store import Status
from steerable.stores.memory import MemoryStore
from tests.service.http.conftest import Build, LiveServer, app_over

PROBLEM = "application/problem+json"


def is_problem(response: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    """The problem body of ``response``, checked."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    body: dict[str, Any] = response.json()
    assert set(body) == {"type", "title", "status", "detail", "code"}
    assert body["status"] == status
    if code is not None:
        assert body["code"] == code, body
    return body


async def until_running(http: httpx.AsyncClient, sid: str, *, steps: int = 1) -> dict[str, Any]:
    """The session's status once its turn runs with ``steps`` steps made (a tool runs)."""
    for _ in range(3000):
        status = (await http.get(f"/v1/sessions/{sid}")).json()
        turn = status.get("turn")
        if turn and turn["state"] == "running" and turn["steps"] >= steps:
            return dict(status)
        await asyncio.sleep(0.01)
    raise AssertionError(f"the turn of {sid} never ran")


async def ended(http: httpx.AsyncClient, sid: str, turn: str) -> dict[str, Any]:
    """The turn once it ended."""
    for _ in range(10):
        view = (await http.get(f"/v1/sessions/{sid}/turns/{turn}", params={"wait": 30})).json()
        if view["state"] not in ("queued", "running"):
            return dict(view)
    raise AssertionError(f"turn {turn} never ended")


# -- the verbs and the views -------------------------------------------------------------------


async def test_a_send_runs_a_turn_and_every_view_shows_it(client: httpx.AsyncClient) -> None:
    sent = await client.post("/v1/sessions/s1/messages", json={"text": "hello", "id": "m1"})
    assert sent.status_code == 202
    assert sent.json() == {"id": "m1", "turn": "m1", "state": "started", "ahead": 0}
    done = await ended(client, "s1", "m1")
    assert done["state"] == "completed"
    assert done["output"] == "answered: hello"
    assert done["holder"] is None and done["steps"] >= 1
    page = (await client.get("/v1/sessions/s1/transcript")).json()
    first = page["messages"][0]
    assert isinstance(first.pop("at"), float)
    assert first == {
        "position": 0,
        "id": "m1",
        "turn": "m1",
        "steered": False,
        "role": "user",
        "parts": [{"type": "text", "text": "hello"}],
    }
    kinds = [p["type"] for m in page["messages"] for p in m["parts"]]
    assert kinds == ["text", "tool_call", "tool_result", "text"]
    assert page["next"] is None
    fate = (await client.get("/v1/sessions/s1/inputs/m1")).json()
    assert isinstance(fate.pop("at"), float)
    assert fate == {
        "id": "m1",
        "kind": "send",
        "text": "hello",
        "seq": 1,
        "state": "turn",
        "turn": "m1",
        "step": None,
        "metadata": {},
    }
    status = (await client.get("/v1/sessions/s1")).json()
    assert status == {
        "session": "s1",
        "turn": None,
        "waiting": [],
        "waiting_total": 0,
        "waiting_next": None,
        "queued": 0,
        "metadata": {},
    }


async def test_a_steer_is_taken_at_the_next_step_and_a_send_queues(
    client: httpx.AsyncClient,
) -> None:
    await client.post("/v1/sessions/s/messages", json={"text": "plan", "id": "p"})
    await until_running(client, "s")
    steer = await client.post("/v1/sessions/s/steers", json={"text": "skip friday", "id": "st"})
    assert steer.status_code == 202
    assert steer.json() == {"id": "st", "turn": "p", "fate": None}
    later = await client.post("/v1/sessions/s/messages", json={"text": "next", "id": "n"})
    assert later.json() == {"id": "n", "turn": "n", "state": "queued", "ahead": 1}
    done = await ended(client, "s", "p")
    assert done["output"] == "answered: plan | skip friday"
    assert done["steers_taken"] == 1
    fate = (await client.get("/v1/sessions/s/inputs/st")).json()
    assert fate["state"] == "taken" and fate["turn"] == "p" and fate["step"] >= 1
    assert (await ended(client, "s", "n"))["output"] == "answered: next"


async def test_stop_ends_the_running_turn(
    serve_app: Callable[[Build], LiveServer], store_url: str
) -> None:
    server = serve_app(app_over(store_url, agent=demo_agent(seconds=60)))
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        await http.post("/v1/sessions/s/messages", json={"text": "long", "id": "t"})
        await until_running(http, "s")
        stop = await http.post("/v1/sessions/s/stop", json={}, headers={"Idempotency-Key": "k"})
        assert stop.status_code == 202
        assert stop.json() == {"turn": "t"}
        assert (await ended(http, "s", "t"))["state"] == "stopped"
        again = await http.post("/v1/sessions/s/stop")  # no body at all: fine too
        assert again.status_code == 202
        assert again.json() == {"turn": None}


async def test_the_listing_pages_by_id_with_each_state(client: httpx.AsyncClient) -> None:
    for sid in ("c", "a", "b"):
        await client.post(f"/v1/sessions/{sid}/messages", json={"text": "x", "id": sid})
    for sid in ("a", "b", "c"):
        await ended(client, sid, sid)
    first = (await client.get("/v1/sessions", params={"limit": 2})).json()
    assert [s["session"] for s in first["sessions"]] == ["a", "b"]
    assert first["next"] == "b"
    assert {s["state"] for s in first["sessions"]} == {"idle"}
    assert set(first["sessions"][0]) == {
        "session",
        "state",
        "turn",
        "queued",
        "updated_at",
        "metadata",
    }
    rest = (await client.get("/v1/sessions", params={"limit": 2, "after": "b"})).json()
    assert [s["session"] for s in rest["sessions"]] == ["c"]
    assert rest["next"] is None
    running = (await client.get("/v1/sessions", params={"state": "running"})).json()
    assert running == {"sessions": [], "next": None}


async def test_the_transcript_pages_by_position(client: httpx.AsyncClient) -> None:
    await client.post("/v1/sessions/s/messages", json={"text": "x", "id": "x"})
    await ended(client, "s", "x")
    first = (await client.get("/v1/sessions/s/transcript", params={"limit": 3})).json()
    assert [m["position"] for m in first["messages"]] == [0, 1, 2]
    assert first["next"] == 2
    rest = (await client.get("/v1/sessions/s/transcript", params={"after": 2})).json()
    assert [m["position"] for m in rest["messages"]] == [3]


# -- idempotency ------------------------------------------------------------------------------


async def test_the_same_key_and_body_is_one_input_with_the_same_answer(
    client: httpx.AsyncClient,
) -> None:
    headers = {"Idempotency-Key": "k1"}
    first = await client.post("/v1/sessions/s/messages", json={"text": "once"}, headers=headers)
    again = await client.post("/v1/sessions/s/messages", json={"text": "once"}, headers=headers)
    assert first.status_code == again.status_code == 202
    assert (
        first.json()
        == again.json()
        == {
            "id": "k1",
            "turn": "k1",
            "state": "started",
            "ahead": 0,
        }
    )
    await ended(client, "s", "k1")
    page = (await client.get("/v1/sessions/s/transcript")).json()
    assert [
        m["id"] for m in page["messages"] if m["role"] == "user" and m["parts"][0].get("text")
    ] == ["k1"]
    same_id = await client.post("/v1/sessions/s/messages", json={"text": "once", "id": "k1"})
    assert same_id.json()["id"] == "k1"


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("messages", {"text": "another"}),
        ("steers", {"text": "once"}),  # the same text as a steer: another kind
    ],
)
async def test_the_same_key_with_another_body_is_409(
    client: httpx.AsyncClient, path: str, body: dict[str, Any]
) -> None:
    headers = {"Idempotency-Key": "k1"}
    await client.post("/v1/sessions/s/messages", json={"text": "once"}, headers=headers)
    answer = await client.post(f"/v1/sessions/s/{path}", json=body, headers=headers)
    is_problem(answer, 409, "idempotency_conflict")
    fate = (await client.get("/v1/sessions/s/inputs/k1")).json()
    assert fate["text"] == "once" and fate["kind"] == "send"


async def test_a_body_id_and_another_key_is_409(client: httpx.AsyncClient) -> None:
    """Each is valid alone (the schema allows both): together they name two inputs."""
    answer = await client.post(
        "/v1/sessions/s/messages", json={"text": "t", "id": "a"}, headers={"Idempotency-Key": "b"}
    )
    is_problem(answer, 409, "idempotency_conflict")
    is_problem(await client.get("/v1/sessions/s"), 404, "session_not_found")


# -- what is not there ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "code"),
    [
        ("GET", "/v1/sessions/nobody", "session_not_found"),
        ("GET", "/v1/sessions/nobody/transcript", "session_not_found"),
        ("GET", "/v1/sessions/nobody/events", "session_not_found"),
        ("POST", "/v1/sessions/nobody/stop", "session_not_found"),
        ("GET", "/v1/sessions/s/turns/nope", "turn_not_found"),
        ("GET", "/v1/sessions/s/inputs/nope", "input_not_found"),
        ("GET", "/v2/anything", "not_found"),
        ("DELETE", "/v1/sessions/nobody", "session_not_found"),
        ("DELETE", "/v1/sessions/s/inputs/nope", "input_not_found"),
        ("PATCH", "/v1/sessions/s", "method_not_allowed"),
    ],
)
async def test_what_does_not_exist_is_a_404_with_its_code(
    client: httpx.AsyncClient, method: str, path: str, code: str
) -> None:
    await client.post("/v1/sessions/s/messages", json={"text": "x", "id": "x"})
    status = 405 if code == "method_not_allowed" else 404
    is_problem(await client.request(method, path), status, code)


# -- bad input --------------------------------------------------------------------------------

JSON = {"content-type": "application/json"}
BAD: list[tuple[str, str, dict[str, Any]]] = [
    ("POST", "/v1/sessions/s/messages", {"content": b"not json", "headers": JSON}),
    ("POST", "/v1/sessions/s/messages", {"content": b"\xff\xfe", "headers": JSON}),
    ("POST", "/v1/sessions/s/messages", {"content": b"[1, 2]", "headers": JSON}),
    ("POST", "/v1/sessions/s/messages", {"content": b"", "headers": JSON}),
    ("POST", "/v1/sessions/s/messages", {"content": b"text=hi"}),
    ("POST", "/v1/sessions/s/messages", {"json": {"text": 5}}),
    ("POST", "/v1/sessions/s/messages", {"json": {"text": ["a"]}}),
    ("POST", "/v1/sessions/s/messages", {"json": {"text": "a", "id": 7}}),
    ("POST", "/v1/sessions/s/messages", {"json": {"text": "a", "id": ""}}),
    ("POST", "/v1/sessions/s/messages", {"json": {"text": "a", "id": "x" * 300}}),
    ("POST", "/v1/sessions/s/messages", {"json": {"text": "a", "id": "a\x00b"}}),
    ("POST", "/v1/sessions/s/messages", {"json": {}}),
    ("POST", "/v1/sessions/s/messages", {"json": {"text": ""}}),
    ("POST", "/v1/sessions/s/messages", {"json": {"text": "   "}}),
    ("POST", "/v1/sessions/s/messages", {"json": {"text": "a\x00b"}}),
    ("POST", "/v1/sessions/s/messages", {"content": b'{"text": "\\ud800"}', "headers": JSON}),
    (
        "POST",
        "/v1/sessions/s/messages",
        {"content": b'{"text": "a", "id": "\\udfff"}', "headers": JSON},
    ),
    ("POST", "/v1/sessions/s/messages", {"json": {"text": "x" * 1_000_001}}),
    ("POST", "/v1/sessions/s/steers", {"json": {"text": None}}),
    (
        "POST",
        "/v1/sessions/s/messages",
        {"json": {"text": "a"}, "headers": {"Idempotency-Key": "k" * 300}},
    ),
    ("POST", "/v1/sessions/%00/messages", {"json": {"text": "a"}}),
    ("POST", "/v1/sessions/" + "s" * 300 + "/messages", {"json": {"text": "a"}}),
    ("POST", "/v1/sessions/" + "s" * 250 + "/messages", {"json": {"text": "a"}}),
    ("POST", "/v1/sessions/s/stop", {"content": b"not json", "headers": JSON}),
    ("POST", "/v1/sessions/s/stop", {"json": [1]}),
    ("GET", "/v1/sessions/%00", {}),
    ("GET", "/v1/sessions/%ED%A0%80", {}),
    ("GET", "/v1/sessions/%FF%FE/transcript", {}),
    ("GET", "/v1/sessions/" + "s" * 300, {}),
    ("GET", "/v1/sessions", {"params": {"limit": 10**30}}),
    ("GET", "/v1/sessions", {"params": {"limit": 0}}),
    ("GET", "/v1/sessions", {"params": {"limit": "many"}}),
    ("GET", "/v1/sessions", {"params": {"state": "sleeping"}}),
    ("GET", "/v1/sessions", {"params": {"after": "a\x00"}}),
    ("GET", "/v1/sessions", {"params": {"after": "x" * 300}}),
    ("GET", "/v1/sessions/s/transcript", {"params": {"after": 10**30}}),
    ("GET", "/v1/sessions/s/transcript", {"params": {"after": -2}}),
    ("GET", "/v1/sessions/s/transcript", {"params": {"limit": 1001}}),
    ("GET", "/v1/sessions/s/turns/x", {"params": {"wait": "1e400"}}),
    ("GET", "/v1/sessions/s/turns/x", {"params": {"wait": "nan"}}),
    ("GET", "/v1/sessions/s/turns/x", {"params": {"wait": 61}}),
    ("GET", "/v1/sessions/s/turns/x", {"params": {"wait": -1}}),
    ("GET", "/v1/sessions/s/turns/%00", {}),
    ("GET", "/v1/sessions/s/inputs/" + "i" * 300, {}),
    ("GET", "/v1/sessions/s/events", {"headers": {"Last-Event-ID": "abc"}}),
    ("GET", "/v1/sessions/s/events", {"headers": {"Last-Event-ID": "9" * 40}}),
    ("GET", "/v1/sessions/s/events", {"params": {"after": 2**70}}),
]


@pytest.mark.parametrize(("method", "path", "options"), BAD)
async def test_bad_input_is_a_4xx_problem(
    client: httpx.AsyncClient, method: str, path: str, options: dict[str, Any]
) -> None:
    await client.post("/v1/sessions/s/messages", json={"text": "exists", "id": "x"})
    answer = await client.request(method, path, **options)
    assert 400 <= answer.status_code < 500, answer.text
    is_problem(answer, answer.status_code)


# -- the body's bound ------------------------------------------------------------------------


async def raw(url: str, request: bytes) -> tuple[int, dict[str, str], Any]:
    """Write ``request`` as is, read the answer to the end: status, headers, JSON body."""
    host, _, port = url.removeprefix("http://").partition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(request)
        await writer.drain()
        answer = await reader.read()  # the server closes: it will not read the rest
    finally:
        writer.close()
        await writer.wait_closed()
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (x.partition(":") for x in lines)}
    return int(status_line.split()[1]), headers, json.loads(body)


def is_too_large(status: int, headers: dict[str, str], body: Any) -> None:
    """A 413 ``too_large`` problem that closes the connection."""
    assert status == 413, body
    assert headers["content-type"] == PROBLEM
    assert headers["connection"] == "close"
    assert body["code"] == "too_large" and body["status"] == 413


POST = b"POST /v1/sessions/s/messages HTTP/1.1\r\nHost: api\r\nContent-Type: application/json\r\n"


async def test_a_body_over_the_bound_by_its_length_is_413_unread(
    serve_app: Callable[[Build], LiveServer], store_url: str
) -> None:
    server = serve_app(app_over(store_url))
    # 300 MB announced, not one byte sent: the answer comes without reading any
    request = POST + b"Content-Length: 300000000\r\n\r\n"
    is_too_large(*await raw(server.url, request))


async def test_a_chunked_body_over_the_bound_is_413_unfinished(
    serve_app: Callable[[Build], LiveServer], store_url: str
) -> None:
    server = serve_app(app_over(store_url, max_body=1000))
    chunk = b"12c\r\n" + b" " * 300 + b"\r\n"  # 0x12c = 300 bytes, four of them: 1200
    request = POST + b"Transfer-Encoding: chunked\r\n\r\n" + chunk * 4  # and never the end
    is_too_large(*await raw(server.url, request))


def padded(size: int) -> bytes:
    """A send's JSON body of exactly ``size`` bytes."""
    body = json.dumps({"text": "hi"}).encode()
    return body[:-1] + b" " * (size - len(body)) + b"}"


async def test_a_body_within_the_bound_is_handled(
    serve_app: Callable[[Build], LiveServer], store_url: str
) -> None:
    server = serve_app(app_over(store_url, max_body=1000))
    headers = {"Content-Type": "application/json"}

    async def chunks(body: bytes) -> AsyncIterator[bytes]:
        for at in range(0, len(body), 300):
            yield body[at : at + 300]

    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        url = "/v1/sessions/s/messages"
        fits = await http.post(url, content=padded(1000), headers=headers)
        assert fits.status_code == 202, fits.text
        chunked = await http.post(url, content=chunks(padded(1000)), headers=headers)
        assert chunked.status_code == 202, chunked.text
        assert "content-length" not in chunked.request.headers
        over = await http.post(url, content=padded(1001), headers=headers)
        is_problem(over, 413, "too_large")
        over = await http.post(url, content=chunks(padded(1001)), headers=headers)
        is_problem(over, 413, "too_large")
        assert (await http.get("/v1/sessions/s")).status_code == 200  # no body, no bound


async def test_the_default_bound_takes_the_longest_text(
    serve_app: Callable[[Build], LiveServer], store_url: str
) -> None:
    server = serve_app(app_over(store_url, agent=demo_agent(seconds=0), serve=False))
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        answer = await http.post("/v1/sessions/s/messages", json={"text": "é" * (MAX_TEXT // 2)})
        assert answer.status_code == 202, answer.text


# -- health, readiness, the schema --------------------------------------------------------------


class FlakyStore(MemoryStore):
    """A memory store whose reads fail while ``down`` is set."""

    down = False

    async def status(self, session: str, *, limit: int = 100) -> Status:
        if self.down:
            raise StoreUnavailable("the test took the store down")
        return await super().status(session, limit=limit)


async def test_readiness_follows_the_store_and_liveness_does_not() -> None:
    store = FlakyStore()
    app = create_app(Service(store))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as http:
        assert (await http.get("/readyz")).status_code == 200
        store.down = True
        answer = await http.get("/readyz")
        is_problem(answer, 503, "store_unavailable")
        assert answer.headers["retry-after"]
        assert (await http.get("/healthz")).status_code == 200
        is_problem(await http.get("/v1/sessions/s"), 503, "store_unavailable")


async def test_the_schema_describes_every_route_its_problems_and_the_stream() -> None:
    app = create_app(Service(MemoryStore()), tokens={"t": "acme"})
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as http:
        schema = (await http.get("/openapi.json")).json()
    paths = schema["paths"]
    assert set(paths) == {
        "/healthz",
        "/readyz",
        "/v1/sessions",
        "/v1/sessions/{sid}",
        "/v1/sessions/{sid}/messages",
        "/v1/sessions/{sid}/steers",
        "/v1/sessions/{sid}/stop",
        "/v1/sessions/{sid}/transcript",
        "/v1/sessions/{sid}/turns/{tid}",
        "/v1/sessions/{sid}/inputs/{id}",
        "/v1/sessions/{sid}/events",
        "/v1/sessions/{sid}/inputs",
        "/v1/sessions/{sid}/turns",
        "/v1/sessions/{sid}/metadata",
        "/v1/sessions/{sid}/fork",
    }
    for name, path in paths.items():
        for operation in path.values():
            for status, response in operation["responses"].items():
                if status[0] in "45":
                    assert list(response["content"]) == [PROBLEM], (name, status)
            if name.startswith("/v1/"):
                assert {"401", "422"} <= set(operation["responses"]), name
                assert operation["security"] == [{"bearer": []}]
            if "post" in path:
                assert "413" in path["post"]["responses"], name
    events = paths["/v1/sessions/{sid}/events"]["get"]["responses"]["200"]["content"]
    assert "text/event-stream" in events
    assert schema["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"


async def test_each_operation_has_the_name_a_generated_client_would_want() -> None:
    app = create_app(Service(MemoryStore()))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as http:
        schema = (await http.get("/openapi.json")).json()
    names = {
        f"{method.upper()} {path}": operation["operationId"]
        for path, methods in schema["paths"].items()
        for method, operation in methods.items()
    }
    assert names == {
        "GET /healthz": "check_liveness",
        "GET /readyz": "check_readiness",
        "POST /v1/sessions/{sid}/messages": "send",
        "POST /v1/sessions/{sid}/steers": "steer",
        "POST /v1/sessions/{sid}/stop": "stop",
        "GET /v1/sessions": "list_sessions",
        "GET /v1/sessions/{sid}": "get_status",
        "GET /v1/sessions/{sid}/transcript": "get_transcript",
        "GET /v1/sessions/{sid}/turns/{tid}": "get_turn",
        "GET /v1/sessions/{sid}/inputs/{id}": "get_input",
        "GET /v1/sessions/{sid}/events": "follow_events",
        "GET /v1/sessions/{sid}/inputs": "list_inputs",
        "DELETE /v1/sessions/{sid}/inputs/{id}": "cancel_input",
        "GET /v1/sessions/{sid}/turns": "list_turns",
        "PUT /v1/sessions/{sid}/metadata": "set_metadata",
        "DELETE /v1/sessions/{sid}": "delete_session",
        "POST /v1/sessions/{sid}/fork": "fork_session",
    }


async def test_without_tokens_the_schema_lists_no_401_and_no_bearer() -> None:
    app = create_app(Service(MemoryStore()))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as http:
        schema = (await http.get("/openapi.json")).json()
    for name, path in schema["paths"].items():
        for operation in path.values():
            assert "401" not in operation["responses"], name
            assert "security" not in operation, name
            if name.startswith("/v1/"):
                assert "422" in operation["responses"], name
    assert "securitySchemes" not in schema.get("components", {})


def test_without_fastapi_the_import_names_the_extra() -> None:
    code = "import sys; sys.modules['fastapi'] = None; import steerable.service.http"
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: steerable.service.http needs fastapi"), run.stderr
    assert last.endswith("pip install 'steerable[serve]'")


def test_the_service_loads_no_web_framework() -> None:
    code = (
        "import sys, steerable, steerable.service, steerable.service.demo\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in"
        " ('fastapi', 'starlette', 'uvicorn', 'httpx')))"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert run.stdout.strip() == "[]", run.stderr
