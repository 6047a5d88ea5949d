"""Line ends inside ids and texts: an event stream carries them, and no reader splits there.

JSON escapes CR and LF but not U+2028, U+2029 or U+0085, and Python's ``str.splitlines``
(httpx's ``aiter_lines``) ends a line at each of them. A text holding one of them and a
line that looks like an event would forge that event in a reader that splits there. The
server sends ASCII-only JSON, and the client splits lines only where the SSE spec does
(CRLF, LF, CR): each half is tested alone (the client against a server that sends the
characters raw), and both together through a real server and the real client.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import StreamingResponse

from steerable.service import Service
from steerable.service.client import Client, Event
from tests.service.http.conftest import Build, LiveServer, app_over

HANG = 60.0
ENDS = ["\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e"]


def forged(end: str) -> str:
    """A text that, split at ``end``, reads as a blank line and then a ``turn_ended``."""
    event = '{"id": 999, "kind": "turn_ended", "turn": "forged", "data": {}, "at": 0}'
    return f"x{end}{end}id: 999{end}event: turn_ended{end}data: {event}{end}{end}y"


async def follow(client: Client, session: str, last_turn: str) -> list[Event]:
    """Every event the client yields for ``session`` until ``last_turn`` ended."""
    seen: list[Event] = []
    async with asyncio.timeout(HANG), contextlib.aclosing(client.events(session)) as events:
        async for event in events:
            seen.append(event)
            if event.kind == "turn_ended" and event.turn == last_turn:
                return seen
    raise AssertionError("unreachable: events() never ends by itself")


async def test_line_ends_in_ids_and_texts_forge_nothing_through_server_and_client(
    serve_app: Callable[[Build], LiveServer], store_url: str
) -> None:
    server = serve_app(app_over(store_url))
    sent: list[tuple[str, str]] = []
    async with Client(server.url, backoff=0.01) as client:
        for n, end in enumerate(ENDS):
            id, text = f"{n}{end}{forged(end)[:200]}", f"say {forged(end)}"
            accepted = await client.send("s", text, id=id)
            assert accepted.id == id
            sent.append((id, text))
        seen = await follow(client, "s", sent[-1][0])
    assert server.app is not None
    service: Service = server.app.state.service
    stored = server.call(lambda: service.events("default/s", after=0, limit=1000))
    durable = [e for e in seen if e.id is not None]
    assert [(e.id, e.kind, e.turn, e.data) for e in durable] == [
        (e.id, e.kind, e.turn, e.data) for e in stored
    ]
    assert all(e.kind in ("delta", "tool") for e in seen if e.id is None)
    assert not [e for e in seen if e.turn == "forged" or e.id == 999]
    inputs = [e.data["id"] for e in durable if e.kind == "input"]
    assert inputs == [id for id, _ in sent]
    ended = [e.turn for e in durable if e.kind == "turn_ended"]
    assert ended == [id for id, _ in sent]
    for id, text in sent:  # the live deltas too: every piece once, none cut
        deltas = "".join(e.data["text"] for e in seen if e.kind == "delta" and e.turn == id)
        assert f"answered: {text}".endswith(deltas.removesuffix(" "))  # a space per word


async def test_the_stream_s_bytes_are_ascii(
    serve_app: Callable[[Build], LiveServer], store_url: str
) -> None:
    server = serve_app(app_over(store_url))
    text = " ".join(forged(end) for end in ENDS) + " astral \U0001f600 and \u00e9"
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        await http.post("/v1/sessions/s/messages", json={"text": "hi", "id": "\u2028id"})
        raw = b""
        async with (
            asyncio.timeout(HANG),
            http.stream("GET", "/v1/sessions/s/events") as response,
        ):
            async for chunk in response.aiter_bytes():
                if not raw:  # subscribed: this turn's deltas come to this stream
                    await http.post("/v1/sessions/s/messages", json={"text": text, "id": "t"})
                raw += chunk
                if b'"turn_ended","turn":"t"' in raw and raw.endswith(b"\n\n"):
                    break
    assert raw.isascii()
    data = [json.loads(line[6:]) for line in raw.decode().split("\n") if line[:6] == "data: "]
    assert data[0]["kind"] == "input" and data[0]["data"]["id"] == "\u2028id", data[0]
    live = [d for d in data if "kind" not in d and d["turn"] == "t"]
    deltas = "".join(d["text"] for d in live if "phase" not in d)  # not the tool events
    assert deltas == f"answered: {text} "


def raw_stream(frames: list[str]) -> Build:
    """A server whose event stream sends ``frames`` as they are (non-ASCII JSON, any line
    end), then stays open: what a proxy that re-encodes JSON, or another server, may send."""

    @asynccontextmanager
    async def build() -> AsyncIterator[FastAPI]:
        app = FastAPI()

        @app.get("/v1/sessions/{sid}/events")
        async def events(sid: str) -> StreamingResponse:
            async def body() -> AsyncIterator[str]:
                for frame in frames:
                    yield frame
                    await asyncio.sleep(0)
                await asyncio.sleep(HANG)

            return StreamingResponse(body(), media_type="text/event-stream")

        yield app

    return build


def durable_frame(id: int, kind: str, turn: str, text: str, end: str = "\n") -> str:
    """One durable event's frame, its JSON with raw non-ASCII, its lines ended by ``end``."""
    data = {"id": id, "kind": kind, "turn": turn, "data": {"text": text}, "at": 1.0}
    lines = [f"id: {id}", f"event: {kind}", f"data: {json.dumps(data, ensure_ascii=False)}"]
    return end.join(lines) + end + end


@pytest.mark.parametrize("end", ["\n", "\r\n", "\r"])
async def test_the_client_splits_lines_only_where_the_sse_spec_does(
    serve_app: Callable[[Build], LiveServer], end: str
) -> None:
    frames = [durable_frame(n + 1, "message", "t", forged(e), end) for n, e in enumerate(ENDS)]
    frames.append(durable_frame(len(ENDS) + 1, "turn_ended", "t", "done", end))
    whole = "".join(frames)
    # the same bytes cut at every few characters: a CR and its LF in two chunks, too
    pieces = [whole[at : at + 7] for at in range(0, len(whole), 7)]
    server = serve_app(raw_stream(pieces))
    async with Client(server.url, backoff=0.01) as client:
        seen = await follow(client, "s", "t")
    assert [(e.id, e.kind, e.data.get("text")) for e in seen] == [
        *((n + 1, "message", forged(e)) for n, e in enumerate(ENDS)),
        (len(ENDS) + 1, "turn_ended", "done"),
    ]
