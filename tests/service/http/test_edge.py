"""The app's edge against a real server: HEAD wherever GET is, a trailing slash redirected
to the resource, and CORS, off by default and on for the origins it is given."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from steerable.errors import UsageError
from steerable.service import Service
from steerable.service.http import create_app
from steerable.stores.memory import MemoryStore
from tests.service.http.conftest import Build, LiveServer, app_over
from tests.service.http.test_api import ended, is_problem

PAGE = "https://app.example"
PREFLIGHT = {
    "Origin": PAGE,
    "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "authorization, content-type, idempotency-key",
}
GETS = [
    "/healthz",
    "/readyz",
    "/openapi.json",
    "/v1/sessions",
    "/v1/sessions/s",
    "/v1/sessions/s/transcript?limit=1",
    "/v1/sessions/s/turns/a",
    "/v1/sessions/s/inputs/a",
    "/v1/sessions/nobody",
    "/v1/sessions/s/turns/nope",
    "/v1/sessions/s/transcript?limit=0",
]


async def test_head_is_answered_wherever_get_is_with_its_headers_and_no_body(
    client: httpx.AsyncClient,
) -> None:
    await client.post("/v1/sessions/s/messages", json={"text": "hi", "id": "a"})
    await ended(client, "s", "a")
    for path in GETS:
        got, head = await client.get(path), await client.head(path)
        assert head.status_code == got.status_code, path
        assert head.content == b"", path
        for name in ("content-type", "content-length"):
            assert head.headers.get(name) == got.headers.get(name), (path, name)
    refused = await client.patch("/v1/sessions/s")
    is_problem(refused, 405, "method_not_allowed")
    assert set(refused.headers["allow"].split(", ")) >= {"GET", "HEAD"}


async def test_head_of_an_event_stream_ends_after_its_headers(
    serve_app: Callable[[Build], LiveServer], store_url: str
) -> None:
    server = serve_app(app_over(store_url))
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        await http.post("/v1/sessions/s/messages", json={"text": "hi", "id": "a"})
        async with asyncio.timeout(30):  # a stream that went on would never answer
            head = await http.head("/v1/sessions/s/events")
        assert head.status_code == 200 and head.content == b""
        assert head.headers["content-type"].startswith("text/event-stream")
        is_problem(await http.get("/v1/sessions/nobody/events"), 404, "session_not_found")
        assert (await http.head("/v1/sessions/nobody/events")).status_code == 404
    assert server.app is not None
    fanout = server.app.state.live.fanout

    async def subscriptions() -> int:
        for _ in range(3000):
            if fanout.count() == 0:
                return 0
            await asyncio.sleep(0.01)
        return int(fanout.count())

    assert server.call(subscriptions) == 0  # the stream behind the HEAD ended


@pytest.mark.parametrize(
    ("path", "target"),
    [
        ("/v1/sessions/s/", "/v1/sessions/s"),
        ("/v1/sessions/", "/v1/sessions"),
        ("/v1/sessions/s/transcript/?limit=1", "/v1/sessions/s/transcript?limit=1"),
        ("/v1/sessions/s%20t//", "/v1/sessions/s%20t"),
        ("/healthz/", "/healthz"),
    ],
)
async def test_a_trailing_slash_is_redirected_to_the_resource_by_its_path(
    client: httpx.AsyncClient, path: str, target: str
) -> None:
    await client.post("/v1/sessions/s/messages", json={"text": "hi", "id": "a"})
    for method in ("GET", "HEAD"):
        moved = await client.request(method, path)
        assert moved.status_code == 307, moved.text
        assert moved.headers["location"] == target  # relative: the scheme and host are the
        # client's own, whatever a proxy in front of the server changed
    followed = await client.get(path, follow_redirects=True)
    direct = await client.get(target)
    assert followed.status_code == direct.status_code
    if direct.status_code == 200 and "healthz" not in path:
        assert followed.json().keys() == direct.json().keys()


async def test_a_post_with_a_trailing_slash_is_redirected_body_and_all(
    client: httpx.AsyncClient,
) -> None:
    moved = await client.post("/v1/sessions/s/messages/", json={"text": "hi", "id": "p"})
    assert moved.status_code == 307 and moved.headers["location"] == "/v1/sessions/s/messages"
    is_problem(await client.get("/v1/sessions/s"), 404, "session_not_found")  # not handled
    sent = await client.post(
        "/v1/sessions/s/messages/", json={"text": "hi", "id": "p"}, follow_redirects=True
    )
    assert sent.status_code == 202 and sent.json()["id"] == "p"


async def test_cors_is_off_by_default(client: httpx.AsyncClient) -> None:
    preflight = await client.options("/v1/sessions/s/messages", headers=PREFLIGHT)
    is_problem(preflight, 405, "method_not_allowed")
    answer = await client.get("/healthz", headers={"Origin": PAGE})
    assert answer.status_code == 200
    assert not [h for h in answer.headers if h.startswith("access-control-")]


async def test_cors_allows_the_origins_it_is_given_before_the_gate(
    serve_app: Callable[[Build], LiveServer], store_url: str
) -> None:
    server = serve_app(app_over(store_url, tokens={"tk": "acme"}, cors_origins=[PAGE]))
    token = {"Authorization": "Bearer tk"}
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        preflight = await http.options("/v1/sessions/s/messages", headers=PREFLIGHT)
        assert preflight.status_code == 200  # no token: a browser's preflight has none
        assert preflight.headers["access-control-allow-origin"] == PAGE
        allowed = preflight.headers["access-control-allow-headers"].lower()
        assert {"authorization", "content-type", "idempotency-key", "last-event-id"} <= {
            h.strip() for h in allowed.split(",")
        }
        assert "POST" in preflight.headers["access-control-allow-methods"]
        other = await http.options(
            "/v1/sessions/s/messages", headers={**PREFLIGHT, "Origin": "https://evil.example"}
        )
        assert "access-control-allow-origin" not in other.headers
        sent = await http.post(
            "/v1/sessions/s/messages",
            json={"text": "hi", "id": "a"},
            headers={**token, "Origin": PAGE},
        )
        assert sent.status_code == 202
        assert sent.headers["access-control-allow-origin"] == PAGE
        refused = await http.get("/v1/sessions/s", headers={"Origin": PAGE})
        is_problem(refused, 401, "unauthorized")  # the page can read why
        assert refused.headers["access-control-allow-origin"] == PAGE
        assert "WWW-Authenticate" in refused.headers["access-control-expose-headers"]
        elsewhere = await http.get("/v1/sessions/s", headers={**token, "Origin": "https://x.io"})
        assert elsewhere.status_code == 200
        assert "access-control-allow-origin" not in elsewhere.headers


@pytest.mark.parametrize(
    "origins", ["https://app.example", ["https://app.example/"], ["app.example"], [5], ["*", PAGE]]
)
def test_an_origin_a_browser_never_sends_is_refused_at_creation(origins: Any) -> None:
    with pytest.raises(UsageError, match="cors_origins"):
        create_app(Service(MemoryStore()), cors_origins=origins)


def test_any_origin_is_a_star_alone() -> None:
    create_app(Service(MemoryStore()), cors_origins=["*"])
    create_app(Service(MemoryStore()), cors_origins=[PAGE, "http://127.0.0.1:8080"])
