"""The API's conditional inputs, a steer's fate, a session's lifecycle (cancel, metadata,
turns, delete) and its bounded answers, through a real server over memory and SQLite."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx

from steerable.messages import user
from steerable.service.http import Limits
from tests.service.http.conftest import Build, LiveServer, app_over
from tests.service.http.test_api import ended, is_problem, until_running

MB = 1_000_000


async def _send(http: httpx.AsyncClient, sid: str, text: str, **body: Any) -> httpx.Response:
    return await http.post(f"/v1/sessions/{sid}/messages", json={"text": text, **body})


async def _steer(
    http: httpx.AsyncClient, sid: str, text: str, *, wait: float = 0, **body: Any
) -> httpx.Response:
    params = {"wait": wait} if wait else {}
    return await http.post(f"/v1/sessions/{sid}/steers", json={"text": text, **body}, params=params)


# -- conditional inputs ---------------------------------------------------------------------


async def test_a_send_if_idle_is_refused_while_the_session_is_busy(
    client: httpx.AsyncClient,
) -> None:
    assert (await _send(client, "s", "first", id="a", if_idle=True)).status_code == 202
    refused = await _send(client, "s", "second", id="b", if_idle=True)
    is_problem(refused, 409, "session_not_idle")
    assert "second" not in refused.text
    is_problem(await client.get("/v1/sessions/s/inputs/b"), 404, "input_not_found")
    again = await _send(client, "s", "first", id="a", if_idle=True)  # a retry of the first
    assert again.status_code == 202 and again.json()["id"] == "a"
    await ended(client, "s", "a")
    assert (await _send(client, "s", "now", id="b", if_idle=True)).status_code == 202


async def test_a_steer_for_an_expected_turn_joins_it_or_is_409(client: httpx.AsyncClient) -> None:
    await _send(client, "s", "plan", id="p")
    await until_running(client, "s")
    joined = await _steer(client, "s", "and this", id="j", expected_turn="p")
    assert joined.status_code == 202 and joined.json()["turn"] == "p"
    is_problem(await _steer(client, "s", "x", id="k", expected_turn="other"), 409, "turn_mismatch")
    await ended(client, "s", "p")
    is_problem(await _steer(client, "s", "late", expected_turn="p"), 409, "turn_mismatch")


# -- a steer's fate -------------------------------------------------------------------------


async def test_a_steer_can_wait_for_its_fate(client: httpx.AsyncClient) -> None:
    await _send(client, "s", "plan", id="p")
    await until_running(client, "s")
    taken = await _steer(client, "s", "skip friday", id="st", wait=20)
    assert taken.status_code == 202
    body = taken.json()
    assert body["turn"] == "p"
    assert body["fate"]["state"] == "taken" and body["fate"]["turn"] == "p"
    assert body["fate"]["step"] >= 2
    view = (await client.get("/v1/sessions/s/inputs/st")).json()
    assert (view["state"], view["step"]) == ("taken", body["fate"]["step"])
    await ended(client, "s", "p")
    alone = (await _steer(client, "s", "one more", id="om", wait=5)).json()
    assert alone["turn"] is None and alone["fate"] == {"state": "turn", "turn": "om", "step": None}


# -- cancel, metadata, turns, delete --------------------------------------------------------


async def test_a_queued_input_is_cancelled_and_an_answered_one_is_409(
    client: httpx.AsyncClient,
) -> None:
    await _send(client, "s", "plan", id="p")
    await until_running(client, "s")
    await _send(client, "s", "later", id="q")
    cancelled = await client.delete("/v1/sessions/s/inputs/q")
    assert cancelled.status_code == 200
    assert (cancelled.json()["state"], cancelled.json()["turn"]) == ("cancelled", None)
    assert (await client.delete("/v1/sessions/s/inputs/q")).json()["state"] == "cancelled"
    is_problem(await client.delete("/v1/sessions/s/inputs/p"), 409, "input_not_waiting")
    is_problem(await client.delete("/v1/sessions/s/inputs/nope"), 404, "input_not_found")
    await ended(client, "s", "p")
    is_problem(await client.get("/v1/sessions/s/turns/q"), 404, "turn_not_found")
    turns = (await client.get("/v1/sessions/s/turns")).json()
    assert [t["id"] for t in turns["turns"]] == ["p"]
    events = (await client.get("/v1/sessions/s/inputs", params={"state": "cancelled"})).json()
    assert [i["id"] for i in events["inputs"]] == ["q"]


async def test_metadata_is_kept_on_inputs_and_sessions(client: httpx.AsyncClient) -> None:
    meta = {"user": "ana", "ticket": 42, "tags": ["x"]}
    await _send(client, "s", "hi", id="a", metadata=meta)
    assert (await client.get("/v1/sessions/s/inputs/a")).json()["metadata"] == meta
    put = await client.put("/v1/sessions/s/metadata", json={"metadata": {"title": "Trip"}})
    assert put.status_code == 200 and put.json() == {"metadata": {"title": "Trip"}}
    assert (await client.get("/v1/sessions/s")).json()["metadata"] == {"title": "Trip"}
    listed = (await client.get("/v1/sessions")).json()["sessions"]
    assert [s["metadata"] for s in listed if s["session"] == "s"] == [{"title": "Trip"}]
    is_problem(await _send(client, "s", "x", metadata={"big": "x" * 20_000}), 422)
    is_problem(await _send(client, "s", "x", metadata=[1, 2]), 422)
    is_problem(await client.put("/v1/sessions/s/metadata", json={"title": "no"}), 422)


async def test_turns_are_listed_in_order_with_times(client: httpx.AsyncClient) -> None:
    for name in ("a", "b", "c"):
        await _send(client, "s", name, id=name)
    await ended(client, "s", "c")
    first = (await client.get("/v1/sessions/s/turns", params={"limit": 2})).json()
    assert [t["id"] for t in first["turns"]] == ["a", "b"] and first["next"] == 2
    rest = (await client.get("/v1/sessions/s/turns", params={"after": first["next"]})).json()
    assert [t["id"] for t in rest["turns"]] == ["c"] and rest["next"] is None
    for turn in first["turns"] + rest["turns"]:
        assert turn["state"] == "completed"
        assert turn["started_at"] <= turn["ended_at"]
        assert turn["usage"]["requests"] >= 2


async def test_a_session_is_deleted_once_no_turn_runs(client: httpx.AsyncClient) -> None:
    await _send(client, "s", "plan", id="p")
    await until_running(client, "s")
    is_problem(await client.delete("/v1/sessions/s"), 409, "session_busy")
    await ended(client, "s", "p")
    assert (await client.delete("/v1/sessions/s")).status_code == 204
    is_problem(await client.get("/v1/sessions/s"), 404, "session_not_found")
    is_problem(await client.get("/v1/sessions/s/transcript"), 404, "session_not_found")
    is_problem(await client.delete("/v1/sessions/s"), 404, "session_not_found")
    assert (await _send(client, "s", "again", id="p")).json()["state"] == "started"


async def test_a_session_forks_at_a_message_and_resumes_there(client: httpx.AsyncClient) -> None:
    await _send(client, "s", "plan", id="p")
    await ended(client, "s", "p")
    await _send(client, "s", "and then", id="q")
    await ended(client, "s", "q")
    transcript = (await client.get("/v1/sessions/s/transcript")).json()["messages"]
    first_answer = [m for m in transcript if m["turn"] == "p"][-1]
    forked = await client.post(
        "/v1/sessions/s/fork",
        json={"session": "s2", "at": first_answer["id"], "text": "instead, this", "id": "r"},
    )
    assert forked.status_code == 201, forked.text
    body = forked.json()
    assert body["session"] == "s2" and body["messages"] == first_answer["position"] + 1
    assert body["sent"]["id"] == "r" and body["sent"]["state"] == "started"
    done = await ended(client, "s2", "r")
    assert done["output"] == "answered: instead, this"
    copy = (await client.get("/v1/sessions/s2/transcript")).json()["messages"]
    kept = [m["id"] for m in copy[: body["messages"]]]
    assert kept == [m["id"] for m in transcript[: body["messages"]]]
    assert (await client.get("/v1/sessions/s/transcript")).json()["messages"] == transcript
    again = await client.post("/v1/sessions/s/fork", json={"session": "s2"})
    is_problem(again, 409, "session_exists")
    missing = await client.post("/v1/sessions/s/fork", json={"session": "s3", "at": "nope"})
    is_problem(missing, 404, "message_not_found")
    is_problem(await client.get("/v1/sessions/s3"), 404, "session_not_found")
    nobody = await client.post("/v1/sessions/nobody/fork", json={"session": "s4"})
    is_problem(nobody, 404, "session_not_found")
    is_problem(await client.post("/v1/sessions/s/fork", json={"session": "s"}), 409)


# -- bounds ---------------------------------------------------------------------------------


async def test_a_full_queue_is_429_with_retry_after(
    serve_app: Callable[[Build], LiveServer], store_url: str
) -> None:
    server = serve_app(app_over(store_url, serve=False, service_options={"max_waiting": 2}))
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        for name in ("a", "b"):
            assert (await _send(http, "s", name, id=name)).status_code == 202
        full = await _send(http, "s", "c", id="c")
        is_problem(full, 429, "queue_full")
        assert int(full.headers["retry-after"]) >= 1
        is_problem(await _steer(http, "s", "d"), 429, "queue_full")
        assert (await _send(http, "s", "a", id="a")).status_code == 202  # a retry: answered
        assert (await _send(http, "other", "fine")).status_code == 202


async def test_answers_stop_at_their_budget_and_page_on(
    serve_app: Callable[[Build], LiveServer], store_url: str
) -> None:
    server = serve_app(app_over(store_url, serve=False))
    big = "x" * (9 * MB // 10)
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as http:
        for i in range(12):
            assert (await _send(http, "s", big, id=f"m{i:02}")).status_code == 202
        status = await http.get("/v1/sessions/s")
        assert len(status.content) < 5 * MB
        body = status.json()
        assert body["waiting_total"] == 12 and 1 <= len(body["waiting"]) <= 5
        seen = [w["id"] for w in body["waiting"]]
        after = body["waiting_next"]
        while after is not None:
            page = await http.get(
                "/v1/sessions/s/inputs", params={"state": "waiting", "after": after}
            )
            assert len(page.content) < 5 * MB
            seen += [i["id"] for i in page.json()["inputs"]]
            after = page.json()["next"]
        assert seen == [f"m{i:02}" for i in range(12)]

        async def save() -> None:
            assert server.app is not None
            store = server.app.state.service.store
            await store.save("default/t", [user(big) for _ in range(10)], at=0)

        server.call(save)
        positions: list[int] = []
        after = -1
        while True:
            page = await http.get("/v1/sessions/t/transcript", params={"after": after})
            assert len(page.content) < 5 * MB
            positions += [m["position"] for m in page.json()["messages"]]
            if page.json()["next"] is None:
                break
            after = page.json()["next"]
        assert positions == list(range(10))


async def test_a_tenant_over_its_rate_is_429(
    serve_app: Callable[[Build], LiveServer], store_url: str
) -> None:
    limits = Limits(rate=0.5, burst=2)
    server = serve_app(app_over(store_url, serve=False, limits=limits))
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        assert (await _send(http, "s", "a")).status_code == 202
        assert (await _send(http, "s", "b")).status_code == 202
        over = await _send(http, "s", "c")
        is_problem(over, 429, "rate_limited")
        assert int(over.headers["retry-after"]) >= 1
        assert (await http.get("/v1/sessions/s")).json()["waiting_total"] == 2


async def test_a_tenant_holds_at_most_its_streams(
    serve_app: Callable[[Build], LiveServer], store_url: str
) -> None:
    server = serve_app(app_over(store_url, serve=False, limits=Limits(streams=1)))
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        await _send(http, "s", "a")
        async with http.stream("GET", "/v1/sessions/s/events") as first:
            assert first.status_code == 200
            is_problem(await http.get("/v1/sessions/s/events"), 429, "too_many_streams")
        for _ in range(100):  # the first stream's slot is given back once it closed
            async with http.stream("GET", "/v1/sessions/s/events") as again:
                if again.status_code == 200:
                    return
            await asyncio.sleep(0.05)
        raise AssertionError("the closed stream's slot was never given back")


async def test_a_stalled_body_is_408(
    serve_app: Callable[[Build], LiveServer], store_url: str
) -> None:
    server = serve_app(app_over(store_url, serve=False, body_timeout=0.5))
    host, port = server.url.removeprefix("http://").split(":")
    head = (
        b"POST /v1/sessions/s/messages HTTP/1.1\r\nHost: api\r\nContent-Type: application/json\r\n"
    )
    for framing, start in (
        (b"Content-Length: 100\r\n\r\n", b'{"text": "'),
        (b"Transfer-Encoding: chunked\r\n\r\n", b'a\r\n{"text": "\r\n'),
    ):
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(head + framing + start)
        await writer.drain()
        answer = b""
        while b"}" not in answer:  # the head, then the problem's body
            piece = await asyncio.wait_for(reader.read(4096), 10)
            if not piece:
                break
            answer += piece
        writer.close()
        assert answer.startswith(b"HTTP/1.1 408"), (framing, answer[:80])
        assert b"body_timeout" in answer
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        is_problem(await http.get("/v1/sessions/s"), 404, "session_not_found")
