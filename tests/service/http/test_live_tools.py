"""Live tool events on the event stream: ``event: tool`` when a call of the core loop starts
and when it ends, before the step that stores the call and its result; across replicas over
Postgres; arguments and results cut to ``CAP`` characters with ``truncated``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx

from steerable.models.scripted import ScriptedModel, call
from steerable.service.agent import ReActAgent
from steerable.service.http._live import CAP, LiveTool
from steerable.spec import Spec
from steerable.tools import tool
from tests.service.http.conftest import Build, Frame, LiveServer, app_over
from tests.service.http.test_api import ended
from tests.service.http.test_sse import HANG, _listening, ended_turn, read_until

LONG = "é\x01" * 3000  # 6000 characters; escaped in JSON, far over 8000 bytes


@tool
async def lookup(q: str, pad: str = "") -> str:
    """Look ``q`` up: a long text for "long", a failure for "fail" (``pad`` is ignored)."""
    await asyncio.sleep(0.05)
    if q == "fail":
        raise RuntimeError("no such thing")
    return LONG if q == "long" else f"far: {q}"


def agent(*script: Any) -> ReActAgent:
    """The core loop's agent with ``lookup``, its model replying to a warm-up turn, then
    from ``script``."""
    return ReActAgent(Spec(tools=[lookup], max_steps=6), ScriptedModel(["warmed up", *script]))


async def warm_up(http: httpx.AsyncClient) -> None:
    """Make session ``s`` with a first turn (a stream of an unknown session is a 404)."""
    await http.post("/v1/sessions/s/messages", json={"text": "warm up", "id": "w"})
    await ended(http, "s", "w")


def tools(seen: list[Frame]) -> list[dict[str, Any]]:
    """The data of the stream's ``tool`` events, in order."""
    assert all(f.id is None for f in seen if f.event == "tool")  # never replayed
    return [f.json() for f in seen if f.event == "tool"]


async def stream_of_turn(http: httpx.AsyncClient, turn: str, text: str) -> list[Frame]:
    """The frames of a stream of session ``s`` that sees turn ``turn`` sent and ended."""
    await warm_up(http)

    async def send() -> None:
        sent = await http.post("/v1/sessions/s/messages", json={"text": text, "id": turn})
        assert sent.status_code == 202

    return await read_until(http, "s", ended_turn(turn), then=send)


async def test_a_stream_sees_a_tool_start_and_end_before_the_step_stores_them(
    serve_app: Callable[[Build], LiveServer], store_url: str
) -> None:
    moon = call("lookup", '{"q": "moon"}', id="call_moon")
    fail = call("lookup", '{"q": "fail"}', id="call_fail")
    server = serve_app(app_over(store_url, agent=agent(moon, fail, "the moon is far")))
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        seen = await stream_of_turn(http, "a", "how far is the moon?")
        transcript = (await http.get("/v1/sessions/s/transcript")).json()
    assert tools(seen) == [
        {
            "turn": "a",
            "phase": "started",
            "call": "call_moon",
            "name": "lookup",
            "arguments": '{"q": "moon"}',
            "truncated": False,
        },
        {
            "turn": "a",
            "phase": "ended",
            "call": "call_moon",
            "name": "lookup",
            "result": "far: moon",
            "error": False,
            "truncated": False,
        },
        {
            "turn": "a",
            "phase": "started",
            "call": "call_fail",
            "name": "lookup",
            "arguments": '{"q": "fail"}',
            "truncated": False,
        },
        {
            "turn": "a",
            "phase": "ended",
            "call": "call_fail",
            "name": "lookup",
            "result": tools(seen)[-1]["result"],
            "error": True,
            "truncated": False,
        },
    ]
    assert "no such thing" in tools(seen)[-1]["result"]
    # each call's start and end come before the stored messages of its step: the reply
    # that made the call, and the result
    for call_id in ("call_moon", "call_fail"):
        at = position_of_call(transcript, call_id)
        first_stored = next(i for i, f in enumerate(seen) if stored_from(f, "a", at))
        mine = [i for i, f in enumerate(seen) if f.event == "tool" and f.json()["call"] == call_id]
        assert len(mine) == 2 and mine[-1] < first_stored, [f.event for f in seen]


def position_of_call(transcript: dict[str, Any], call_id: str) -> int:
    """The transcript position of the reply that made the call ``call_id``."""
    for item in transcript["messages"]:
        if call_id in json.dumps(item["parts"]) and item["role"] == "assistant":
            return int(item["position"])
    raise AssertionError(f"no reply makes {call_id}: {transcript}")


def stored_from(frame: Frame, turn: str, position: int) -> bool:
    """Whether ``frame`` is the ``message`` event of ``turn`` at ``position`` or after."""
    if frame.event != "message":
        return False
    data = frame.json()
    return bool(data["turn"] == turn and data["data"]["position"] >= position)


async def test_a_long_argument_and_result_are_cut_with_the_flag(
    serve_app: Callable[[Build], LiveServer], store_url: str
) -> None:
    arguments = json.dumps({"q": "long", "pad": "y" * 3000})
    server = serve_app(app_over(store_url, agent=agent(call("lookup", arguments), "done")))
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        seen = await stream_of_turn(http, "a", "a long one")
    started, ended_ = tools(seen)
    assert started["truncated"] is True and started["arguments"] == arguments[:CAP]
    assert ended_["truncated"] is True and ended_["result"] == LONG[:CAP]
    assert ended_["error"] is False


async def test_a_stream_on_one_replica_sees_the_tool_calls_another_runs(
    postgres_url: str, serve_app: Callable[[Build], LiveServer]
) -> None:  # the database first: it is dropped after the servers stopped
    """Replica one serves no turns; replica two runs them: the tool events come by NOTIFY,
    a result too big for a notification cut to fit."""
    script = (call("lookup", '{"q": "long"}', id="call_long"), "done")
    one = serve_app(app_over(postgres_url, serve=False, replica="one"))
    two = serve_app(app_over(postgres_url, agent=agent(*script), replica="two"))
    for server in (one, two):
        assert server.app is not None
        await asyncio.wait_for(_listening(server.app, server), HANG)
    async with (
        httpx.AsyncClient(base_url=one.url, timeout=30) as first,
        httpx.AsyncClient(base_url=two.url, timeout=30) as second,
    ):
        await warm_up(second)

        async def send() -> None:
            sent = await second.post("/v1/sessions/s/messages", json={"text": "go", "id": "a"})
            assert sent.status_code == 202

        seen = await read_until(first, "s", ended_turn("a"), then=send)
    started, ended_ = tools(seen)
    assert started == {
        "turn": "a",
        "phase": "started",
        "call": "call_long",
        "name": "lookup",
        "arguments": '{"q": "long"}',
        "truncated": False,
    }
    assert {k: v for k, v in ended_.items() if k != "result"} == {
        "turn": "a",
        "phase": "ended",
        "call": "call_long",
        "name": "lookup",
        "error": False,
        "truncated": True,
    }
    result = ended_["result"]
    assert 1000 < len(result) < CAP and LONG.startswith(result)  # cut further to fit 8000 bytes


def test_a_tool_notification_decodes_to_itself_and_a_delta_only_replica_ignores_it() -> None:
    from steerable.stores.postgres._live import PAYLOAD, _heard_item, _payload

    tool = LiveTool("t/s", "a", "ended", "call_1", "lookup", LONG[:CAP], True, True, 3)
    payload = _payload(tool)
    assert payload is not None and len(payload.encode()) <= PAYLOAD
    heard = _heard_item(payload)
    assert isinstance(heard, LiveTool) and heard.text and LONG.startswith(heard.text)
    assert heard == LiveTool("t/s", "a", "ended", "call_1", "lookup", heard.text, True, True, 3)
    assert "x" not in json.loads(payload)  # an older replica reads "x" as a delta's text
    for wrong in ({"p": "halfway"}, {"e": 1}, {"v": None}, {"a": "3"}):
        assert _heard_item(json.dumps(json.loads(payload) | wrong)) is None
    assert _payload(LiveTool("t/s", "a", "started", "c" * 9000, "lookup", "{}")) is None
