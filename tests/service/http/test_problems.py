"""Problems say what was wrong (the field and the rule), never the caller's value; unknown
body fields and query parameters are refused, naming them; the bounds of the schema are the
server's. Against a real server (uvicorn, loopback) over memory and SQLite."""

from __future__ import annotations

import logging
import re
from typing import Any

import httpx
import pytest
from fastapi.exceptions import RequestValidationError

from steerable.errors import UsageError
from steerable.service import Service
from steerable.service.http import create_app
from steerable.service.http._context import MAX_AFTER
from steerable.service.http._problems import _validation_detail
from steerable.service_store import Status
from steerable.stores.memory import MemoryStore
from tests.service.http.test_api import is_problem
from tests.service.http.test_sse import read_until

MARK = "Zq7hostile"
HOSTILE = f"\n\n\n<b>{MARK}</b>\u2028data: x\r\n" + "z" * 600
JSON = {"content-type": "application/json"}

# (method, path, options, where the problem says it was)
HOSTILE_REQUESTS: list[tuple[str, str, dict[str, Any], str]] = [
    ("POST", "/v1/sessions/s/messages", {"json": {"text": "\n\n\n\u2028 \t"}}, "body.text"),
    ("POST", "/v1/sessions/s/messages", {"json": {"text": f"{HOSTILE}\x00"}}, "body.text"),
    ("POST", "/v1/sessions/s/messages", {"json": {"text": "a", "id": f"{MARK}\x00"}}, "body.id"),
    ("POST", "/v1/sessions/s/messages", {"json": {"text": "a", "id": HOSTILE}}, "body.id"),
    ("POST", "/v1/sessions/s/steers", {"json": {"text": 5, "id": MARK}}, "body.text"),
    ("POST", "/v1/sessions/s/messages", {"json": {"text": "a", HOSTILE: 1}}, "body.[?]"),
    ("POST", "/v1/sessions/s/messages", {"json": {"text": "a", "priority": 9}}, "body.priority"),
    ("POST", "/v1/sessions/s/stop", {"json": {"force": MARK}}, "body.force"),
    (
        "POST",
        "/v1/sessions/s/messages",
        {"content": f'{{"text": "{MARK}'.encode(), "headers": JSON},
        "body",
    ),
    ("GET", "/v1/sessions", {"params": {"state": HOSTILE}}, "query.state"),
    ("GET", "/v1/sessions", {"params": {"after": f"{MARK}\x00"}}, "query.after"),
    ("GET", "/v1/sessions", {"params": {"limit": MARK}}, "query.limit"),
    ("GET", "/v1/sessions", {"params": {HOSTILE: "1"}}, "query.[?]"),
    ("GET", "/v1/sessions", {"params": {"limt": "5"}}, "query.limt"),
    ("GET", "/v1/sessions/s/transcript", {"params": {"after": MARK}}, "query.after"),
    ("GET", "/v1/sessions/s/turns/x", {"params": {"wait": MARK}}, "query.wait"),
    ("GET", f"/v1/sessions/s/turns/{MARK}%00", {}, "path.tid"),
    ("GET", f"/v1/sessions/s/inputs/{MARK}%00", {}, "path.id"),
    ("GET", f"/v1/sessions/{MARK}%00", {}, "path.sid"),
    ("GET", "/v1/sessions/s/events", {"headers": {"Last-Event-ID": MARK}}, "header.Last-Event-ID"),
]


@pytest.mark.parametrize(("method", "path", "options", "where"), HOSTILE_REQUESTS)
async def test_a_problem_names_the_field_and_the_rule_never_the_value(
    client: httpx.AsyncClient, method: str, path: str, options: dict[str, Any], where: str
) -> None:
    await client.post("/v1/sessions/s/messages", json={"text": "exists", "id": "x"})
    answer = await client.request(method, path, **options)
    body = is_problem(answer, 422, "invalid_request")
    detail: str = body["detail"]
    assert detail.startswith(f"{where}: "), detail
    assert MARK not in answer.text and "zzz" not in answer.text, detail
    assert detail.isprintable() and len(detail) < 300, detail
    assert len((await client.get("/v1/sessions/s/transcript")).json()["messages"]) <= 2


async def test_an_unknown_field_stores_nothing(client: httpx.AsyncClient) -> None:
    answer = await client.post(
        "/v1/sessions/s/messages", json={"text": "hi", "id": "u", "priority": 9}
    )
    body = is_problem(answer, 422, "invalid_request")
    rule = "is not a field of this body (unknown fields are refused)"
    assert body["detail"] == f"body.priority: {rule}"
    is_problem(await client.get("/v1/sessions/s"), 404, "session_not_found")
    answer = await client.post("/v1/sessions/s/steers", json={"text": "hi", "id": "u", "x": None})
    is_problem(answer, 422, "invalid_request")
    is_problem(await client.get("/v1/sessions/s"), 404, "session_not_found")


async def test_an_unknown_query_parameter_is_refused_not_ignored(
    client: httpx.AsyncClient,
) -> None:
    await client.post("/v1/sessions/s/messages", json={"text": "hi", "id": "m"})
    answer = await client.get("/v1/sessions/s/transcript", params={"limt": 1})
    body = is_problem(answer, 422, "invalid_request")
    assert body["detail"].startswith("query.limt: is not a parameter of this route")
    assert (await client.get("/v1/sessions/s/transcript", params={"limit": 1})).status_code == 200
    is_problem(await client.get("/healthz", params={"x": 1}), 422, "invalid_request")


async def test_after_goes_as_far_as_the_schema_says_and_no_further(
    client: httpx.AsyncClient,
) -> None:
    schema = (await client.get("/openapi.json")).json()
    for path in ("/v1/sessions/{sid}/transcript", "/v1/sessions/{sid}/events"):
        parameters = schema["paths"][path]["get"]["parameters"]
        after = next(p for p in parameters if p["name"] == "after")
        assert after["schema"]["maximum"] == MAX_AFTER == 2**62 - 1, path
    await client.post("/v1/sessions/s/messages", json={"text": "hi", "id": "m"})
    page = await client.get("/v1/sessions/s/transcript", params={"after": MAX_AFTER})
    assert page.status_code == 200, page.text
    assert page.json() == {"messages": [], "next": None}
    over = await client.get("/v1/sessions/s/transcript", params={"after": MAX_AFTER + 1})
    detail = is_problem(over, 422, "invalid_request")["detail"]
    assert detail == f"query.after: Input should be less than or equal to {MAX_AFTER}"
    for headers, params in (({}, {"after": MAX_AFTER}), ({"Last-Event-ID": "9" * 20}, {})):
        seen = await read_until(
            client, "s", lambda seen: len(seen) >= 1, headers=headers, params=params
        )
        assert seen[0].event == "refetch", seen  # beyond the last event: told so


async def test_optional_parameters_are_not_nullable_and_ids_fit_every_tenant() -> None:
    app = create_app(Service(MemoryStore()), tokens={"t": "a-long-tenant-name", "u": "b"})
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as http:
        schema = (await http.get("/openapi.json")).json()
    room = 255 - len("a-long-tenant-name") - 1
    for name, path in schema["paths"].items():
        for operation in path.values():
            for parameter in operation.get("parameters", ()):
                assert "anyOf" not in parameter["schema"], (name, parameter)
                if parameter["name"] == "sid" or (name, parameter["name"]) == (
                    "/v1/sessions",
                    "after",
                ):
                    assert parameter["schema"]["maxLength"] == room, (name, parameter)
    body = schema["components"]["schemas"]["SendBody"]
    assert body["additionalProperties"] is False
    assert body["properties"]["text"]["pattern"]


TEXTS = ["a", " x ", "\u2028a\x85", "0\x009", "\x00", "a\x00", "\x00a", "", " ", "\x1c\x1d\x1e\x1f"]
TEXTS += ["\u2028\u2029\x85\x0b\x0c\t\r\n", "\u00a0", "\ufeff", "\u200b", "a\nb\n"]


async def test_the_schema_s_text_pattern_is_the_server_s_rule(client: httpx.AsyncClient) -> None:
    """Each text the pattern allows (as Python's ``re`` reads it) is accepted; none other."""
    schema = (await client.get("/openapi.json")).json()
    pattern = schema["components"]["schemas"]["SendBody"]["properties"]["text"]["pattern"]
    for n, text in enumerate(TEXTS):
        answer = await client.post("/v1/sessions/s/messages", json={"text": text, "id": f"t{n}"})
        allowed = bool(text) and re.search(pattern, text) is not None
        assert (answer.status_code == 202) == allowed, (text, answer.text)


def test_a_rule_whose_message_repeats_the_input_is_told_by_its_kind() -> None:
    error = {
        "type": "union_tag_invalid",
        "loc": ("body", "part"),
        "msg": f"Input tag '{MARK}' found using 'type' does not match any of the expected tags",
        "input": MARK,
    }
    detail = _validation_detail(RequestValidationError([error]))
    assert detail == "body.part: is not valid (union_tag_invalid)"


class PickyStore(MemoryStore):
    """A memory store that refuses every status read with a message quoting the session."""

    async def status(self, session: str, *, limit: int = 100) -> Status:
        raise UsageError(f"no status for {session!r}")


async def test_the_library_s_own_refusal_is_logged_not_echoed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = create_app(Service(PickyStore()))
    transport = httpx.ASGITransport(app=app)
    with caplog.at_level(logging.INFO, logger="steerable.service.http"):
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as http:
            answer = await http.get(f"/v1/sessions/{MARK}")
    body = is_problem(answer, 422, "invalid_request")
    assert body["detail"] == "the request breaks a rule of the service"
    assert MARK in caplog.text  # the server's log says which
