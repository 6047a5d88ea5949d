"""Tokens and tenants: a token sees only its tenant's sessions; another's is 404 everywhere."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from steerable.errors import UsageError
from steerable.service import Service
from steerable.service.http import create_app
from steerable.stores.memory import MemoryStore
from tests.service.http.conftest import Build, LiveServer, app_over
from tests.service.http.test_api import ended, is_problem

TOKENS = {"token-a": "acme", "token-b": "bravo"}
A = {"Authorization": "Bearer token-a"}
B = {"Authorization": "Bearer token-b"}

# every route under /v1/ that names a session, with what it needs to be called
ROUTES: list[tuple[str, str, dict[str, Any]]] = [
    ("GET", "/v1/sessions/{sid}", {}),
    ("GET", "/v1/sessions/{sid}/transcript", {}),
    ("GET", "/v1/sessions/{sid}/turns/{sid}", {}),
    ("GET", "/v1/sessions/{sid}/inputs/{sid}", {}),
    ("GET", "/v1/sessions/{sid}/events", {}),
    ("POST", "/v1/sessions/{sid}/stop", {"json": {}}),
]
WRITES: list[tuple[str, str, dict[str, Any]]] = [
    ("POST", "/v1/sessions/{sid}/messages", {"json": {"text": "hi"}}),
    ("POST", "/v1/sessions/{sid}/steers", {"json": {"text": "hi"}}),
]
EVERY = [*ROUTES, *WRITES, ("GET", "/v1/sessions", {})]


@pytest.fixture
async def acme(
    serve_app: Callable[[Build], LiveServer], store_url: str
) -> AsyncIterator[httpx.AsyncClient]:
    """A client of a server with two tenants; acme has session ``s`` with one ended turn."""
    server = serve_app(app_over(store_url, tokens=TOKENS))
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        sent = await http.post("/v1/sessions/s/messages", json={"text": "x", "id": "s"}, headers=A)
        assert sent.status_code == 202
        http.headers.update(A)
        await ended(http, "s", "s")
        http.headers.pop("Authorization")
        yield http


BAD_HEADERS: list[dict[str, Any]] = [
    {},
    {"Authorization": "Bearer wrong"},
    {"Authorization": "Bearer"},
    {"Authorization": "Basic dG9rZW4tYTo="},
    {"Authorization": "token-a"},
    {"Authorization": "Bearer token-a-and-more"},
    {"Authorization": "Bearer tök€n".encode()},
]


@pytest.mark.parametrize(("method", "path", "options"), EVERY)
async def test_a_missing_or_wrong_token_is_401_on_every_route(
    acme: httpx.AsyncClient, method: str, path: str, options: dict[str, Any]
) -> None:
    for headers in BAD_HEADERS:
        answer = await acme.request(method, path.format(sid="s"), headers=headers, **options)
        is_problem(answer, 401, "unauthorized")
        assert answer.headers["www-authenticate"].startswith("Bearer")


@pytest.mark.parametrize(("method", "path", "options"), ROUTES)
async def test_another_tenants_session_is_404_on_every_route(
    acme: httpx.AsyncClient, method: str, path: str, options: dict[str, Any]
) -> None:
    if path.endswith("/events"):  # a stream that works does not end
        async with acme.stream(method, path.format(sid="s"), headers=A) as mine:
            assert mine.status_code == 200
    else:
        mine = await acme.request(method, path.format(sid="s"), headers=A, **options)
        assert mine.status_code in (200, 202), mine.text  # the route works for its tenant
    theirs = await acme.request(method, path.format(sid="s"), headers=B, **options)
    answer = is_problem(theirs, 404)
    assert answer["code"] in ("session_not_found", "turn_not_found", "input_not_found")


@pytest.mark.parametrize(("method", "path", "options"), WRITES)
async def test_a_write_to_the_same_sid_is_another_session(
    acme: httpx.AsyncClient, method: str, path: str, options: dict[str, Any]
) -> None:
    answer = await acme.request(method, path.format(sid="s"), headers=B, **options)
    assert answer.status_code == 202
    assert answer.json().get("turn") != "s"
    mine = (await acme.get("/v1/sessions/s/transcript", headers=A)).json()["messages"]
    texts = [p["text"] for m in mine if m["role"] == "user" for p in m["parts"] if "text" in p]
    assert texts == ["x"]  # acme's session did not get bravo's input


async def test_a_token_lists_only_its_tenants_sessions(acme: httpx.AsyncClient) -> None:
    await acme.post("/v1/sessions/t/messages", json={"text": "b"}, headers=B)
    await acme.post("/v1/sessions/u/messages", json={"text": "b"}, headers=B)
    mine = (await acme.get("/v1/sessions", headers=A)).json()
    assert [s["session"] for s in mine["sessions"]] == ["s"]
    theirs = (await acme.get("/v1/sessions", headers=B)).json()
    assert [s["session"] for s in theirs["sessions"]] == ["t", "u"]
    after = (await acme.get("/v1/sessions", params={"after": "s"}, headers=A)).json()
    assert after["sessions"] == []


async def test_a_session_id_leaves_room_for_the_tenant(acme: httpx.AsyncClient) -> None:
    room = 255 - len("acme") - 1
    fits = await acme.post(f"/v1/sessions/{'x' * room}/messages", json={"text": "a"}, headers=A)
    assert fits.status_code == 202
    listed = (await acme.get("/v1/sessions", headers=A)).json()["sessions"]
    assert "x" * room in [s["session"] for s in listed]
    over = await acme.post(
        f"/v1/sessions/{'x' * (room + 1)}/messages", json={"text": "a"}, headers=A
    )
    is_problem(over, 422, "invalid_request")


async def test_health_needs_no_token(acme: httpx.AsyncClient) -> None:
    assert (await acme.get("/healthz")).status_code == 200
    assert (await acme.get("/readyz")).status_code == 200
    assert (await acme.get("/openapi.json")).status_code == 200


@pytest.mark.parametrize(
    "tokens",
    [{}, {"": "acme"}, {"t": ""}, {"t": "a/b"}, {"t": "x" * 65}, {"t k": "acme"}, {"t": 5}],
)
def test_bad_tokens_are_refused_at_creation(tokens: Any) -> None:
    with pytest.raises(UsageError):
        create_app(Service(MemoryStore()), tokens=tokens)


def test_no_tokens_needs_tenantless_allowed() -> None:
    with pytest.raises(UsageError, match="allow_tenantless"):
        create_app(Service(MemoryStore()), allow_tenantless=False)


async def test_a_mounted_app_gates_and_serves_its_routes(
    serve_app: Callable[[Build], LiveServer], store_url: str
) -> None:
    inner = app_over(store_url, tokens=TOKENS)

    @asynccontextmanager
    async def build() -> AsyncIterator[FastAPI]:
        async with inner() as sub:

            @asynccontextmanager
            async def lifespan(app: FastAPI) -> AsyncIterator[None]:
                async with sub.router.lifespan_context(sub):  # a mount runs no lifespan
                    yield

            parent = FastAPI(lifespan=lifespan)
            parent.mount("/api", sub)
            yield parent

    server = serve_app(build)
    async with httpx.AsyncClient(base_url=f"{server.url}/api", timeout=30) as http:
        sent = await http.post("/v1/sessions/s/messages", json={"text": "x", "id": "s"}, headers=A)
        assert sent.status_code == 202, sent.text
        http.headers.update(A)
        assert (await ended(http, "s", "s"))["state"] == "completed"
        status = await http.get("/v1/sessions/s")
        assert status.status_code == 200 and status.json()["session"] == "s"
        moved = await http.get("/v1/sessions/s/")  # redirected under the mount's prefix
        assert (moved.status_code, moved.headers["location"]) == (307, "/api/v1/sessions/s")
        http.headers.pop("Authorization")
        is_problem(await http.get("/v1/sessions/s"), 401, "unauthorized")
        is_problem(await http.get("/v1/sessions/s", headers=B), 404, "session_not_found")
        assert (await http.get("/healthz")).status_code == 200
