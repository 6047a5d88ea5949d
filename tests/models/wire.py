"""A local HTTP server on loopback that speaks the providers' wire formats, SSE included.

It answers each request with the next entry of its script and records every request
exactly as it arrived (path, headers, body bytes), so a test drives the unmodified SDK
clients against it and asserts on what went over the wire. An answer can be an error with
``Retry-After``, an SSE stream cut off after some events (the connection drops with the
chunked body incomplete), or a hang-up before any answer.

The builders below write each provider's stream the way the provider does: OpenAI Chat
Completions (``data:`` lines, ``[DONE]``), OpenAI Responses and Anthropic Messages (named
``event:`` lines).
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self


@dataclass(frozen=True)
class Recorded:
    """One request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float = 0.0  # time.monotonic() when it arrived

    @property
    def json(self) -> Any:
        """The body, parsed."""
        return json.loads(self.body)


@dataclass
class Answer:
    """What the server sends back: a body, or SSE events (chunked), or nothing at all."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    events: list[bytes] | None = None
    drop_after: int | None = None  # SSE: the connection drops after this many events
    pause: float = 0.0  # SSE: seconds between events
    hang_up: bool = False  # close the connection without answering


AnswerLike = Answer | Callable[[Recorded], Answer]


class WireServer:
    """The server; use it as a context manager. ``url`` is ``http://127.0.0.1:PORT``."""

    def __init__(self, *answers: AnswerLike) -> None:
        self._answers: deque[AnswerLike] = deque(answers)
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def add(self, *answers: AnswerLike) -> None:
        """Queue more answers."""
        with self._lock:
            self._answers.extend(answers)

    @property
    def bodies(self) -> list[Any]:
        """The parsed bodies of the requests so far."""
        return [r.json for r in self.requests]

    def _next(self, request: Recorded) -> Answer:
        with self._lock:
            self.requests.append(request)
            entry = self._answers.popleft() if self._answers else None
        if entry is None:
            return json_answer(500, {"error": {"message": "the test server has no answer left"}})
        return entry(request) if callable(entry) else entry

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def _handler(server: WireServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            headers = {k.lower(): v for k, v in self.headers.items()}
            arrived = time.monotonic()
            answer = server._next(Recorded("POST", self.path, headers, body, arrived))
            if answer.hang_up:
                self._drop()
                return
            self.send_response(answer.status)
            for name, value in answer.headers.items():
                self.send_header(name, value)
            if answer.events is None:
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer.body)))
                self.end_headers()
                self.wfile.write(answer.body)
                return
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for sent, event in enumerate(answer.events):
                if answer.drop_after is not None and sent >= answer.drop_after:
                    self._drop()
                    return
                if sent and answer.pause:
                    time.sleep(answer.pause)
                try:
                    self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
                    self.wfile.flush()
                except OSError:  # the client went away (a stopped run)
                    self.close_connection = True
                    return
            self.wfile.write(b"0\r\n\r\n")

        def _drop(self) -> None:
            self.wfile.flush()
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)

    return Handler


# -- answers ------------------------------------------------------------------------------


def json_answer(status: int, body: Any, headers: dict[str, str] | None = None) -> Answer:
    """A JSON body with ``status``."""
    return Answer(status, dict(headers or {}), json.dumps(body).encode())


def sse(data: Any, event: str | None = None) -> bytes:
    """One server-sent event; ``data`` is JSON-encoded unless it is already text."""
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {text}\n\n".encode()


def openai_error(status: int, message: str, *, headers: dict[str, str] | None = None) -> Answer:
    """An error the way OpenAI writes one."""
    body = {"error": {"message": message, "type": "invalid_request_error", "code": None}}
    return json_answer(status, body, headers)


def anthropic_error(
    status: int, message: str, kind: str = "invalid_request_error", **headers: str
) -> Answer:
    """An error the way Anthropic writes one."""
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return json_answer(status, body, {k.replace("_", "-"): v for k, v in headers.items()})


# -- OpenAI Chat Completions --------------------------------------------------------------


def chat_stream(
    text: Sequence[str] = (),
    calls: Sequence[tuple[str, str, Sequence[str]]] = (),
    *,
    reasoning: Sequence[str] = (),
    usage: tuple[int, int] = (11, 7),
    finish: str | None = None,
) -> Answer:
    """A streamed completion: reasoning pieces, text pieces, then each call's argument pieces."""

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
        return sse({**_CHUNK, "choices": [choice]})

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"reasoning_content": piece}) for piece in reasoning]
    events += [chunk({"content": piece}) for piece in text]
    for index, (call_id, name, pieces) in enumerate(calls):
        start = {"index": index, "id": call_id, "type": "function"}
        events.append(
            chunk({"tool_calls": [{**start, "function": {"name": name, "arguments": ""}}]})
        )
        for piece in pieces:
            events.append(
                chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            )
    events.append(chunk({}, finish or ("tool_calls" if calls else "stop")))
    prompt, completion = usage
    counts = {"prompt_tokens": prompt, "completion_tokens": completion}
    events.append(sse({**_CHUNK, "choices": [], "usage": {**counts, "total_tokens": sum(usage)}}))
    events.append(sse("[DONE]"))
    return Answer(events=events)


_CHUNK = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "test"}


# -- OpenAI Responses ---------------------------------------------------------------------


@dataclass(frozen=True)
class Item:
    """One output item of a response and the pieces its text or arguments stream in."""

    item: dict[str, Any]
    pieces: tuple[str, ...] = ()


def message_item(item_id: str, pieces: Iterable[str]) -> Item:
    """An assistant message item whose text streams in ``pieces``."""
    pieces = tuple(pieces)
    content = [{"type": "output_text", "text": "".join(pieces), "annotations": []}]
    item = {"type": "message", "id": item_id, "status": "completed", "role": "assistant"}
    return Item({**item, "content": content}, pieces)


def call_item(item_id: str, call_id: str, name: str, pieces: Iterable[str]) -> Item:
    """A function call item whose arguments stream in ``pieces``."""
    pieces = tuple(pieces)
    item = {"type": "function_call", "id": item_id, "call_id": call_id, "name": name}
    return Item({**item, "arguments": "".join(pieces), "status": "completed"}, pieces)


def reasoning_item(item_id: str, summary: str, encrypted: str) -> Item:
    """A reasoning item with a summary and encrypted content."""
    summary_parts = [{"type": "summary_text", "text": summary}]
    item = {"type": "reasoning", "id": item_id, "summary": summary_parts}
    return Item({**item, "encrypted_content": encrypted})


def responses_stream(*items: Item, usage: tuple[int, int] = (13, 9)) -> Answer:
    """A streamed response made of ``items``, ending with ``response.completed``."""
    response = {"id": "resp_1", "object": "response", "created_at": 1, "model": "test"}
    events = [_event("response.created", response={**response, "status": "in_progress"})]
    for index, entry in enumerate(items):
        item = entry.item
        started = {**item, "status": "in_progress"}
        if item["type"] == "message":
            started["content"] = []
        if item["type"] == "function_call":
            started["arguments"] = ""
        events.append(_event("response.output_item.added", output_index=index, item=started))
        for piece in entry.pieces:
            if item["type"] == "message":
                events.append(
                    _event(
                        "response.output_text.delta",
                        item_id=item["id"],
                        output_index=index,
                        content_index=0,
                        delta=piece,
                    )
                )
            else:
                events.append(
                    _event(
                        "response.function_call_arguments.delta",
                        item_id=item["id"],
                        output_index=index,
                        delta=piece,
                    )
                )
        events.append(_event("response.output_item.done", output_index=index, item=item))
    tokens = {"input_tokens": usage[0], "output_tokens": usage[1], "total_tokens": sum(usage)}
    done = {**response, "status": "completed", "output": [i.item for i in items], "usage": tokens}
    events.append(_event("response.completed", response=done))
    return Answer(events=events)


_sequence = iter(range(1, 1_000_000))


def _event(kind: str, **fields: Any) -> bytes:
    return sse({"type": kind, "sequence_number": next(_sequence), **fields}, event=kind)


# -- Anthropic Messages -------------------------------------------------------------------


def text_block(*pieces: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A text block streamed in ``pieces``."""
    return {"type": "text", "text": ""}, [{"type": "text_delta", "text": p} for p in pieces]


def tool_use_block(call_id: str, name: str, *pieces: str) -> tuple[dict[str, Any], list[Any]]:
    """A tool_use block whose input streams as ``partial_json`` pieces."""
    start = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
    return start, [{"type": "input_json_delta", "partial_json": p} for p in pieces]


def thinking_block(pieces: Sequence[str], signature: str) -> tuple[dict[str, Any], list[Any]]:
    """A thinking block: thinking pieces, then its signature."""
    deltas: list[dict[str, Any]] = [{"type": "thinking_delta", "thinking": p} for p in pieces]
    deltas.append({"type": "signature_delta", "signature": signature})
    return {"type": "thinking", "thinking": "", "signature": ""}, deltas


def redacted_thinking_block(data: str) -> tuple[dict[str, Any], list[Any]]:
    """A redacted thinking block: it comes whole in its start event."""
    return {"type": "redacted_thinking", "data": data}, []


def anthropic_stream(
    *blocks: tuple[dict[str, Any], list[Any]],
    usage: tuple[int, int] = (17, 5),
    stop_reason: str | None = None,
) -> Answer:
    """A streamed message made of ``blocks``, with a ping in the middle, as Anthropic does."""
    calls = any(start["type"] == "tool_use" for start, _ in blocks)
    message: dict[str, Any] = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": "test",
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": usage[0], "output_tokens": 1},
    }
    events = [sse({"type": "message_start", "message": message}, "message_start")]
    events.append(sse({"type": "ping"}, "ping"))
    for index, (start, deltas) in enumerate(blocks):
        events.append(
            sse(
                {"type": "content_block_start", "index": index, "content_block": start},
                "content_block_start",
            )
        )
        for delta in deltas:
            events.append(
                sse(
                    {"type": "content_block_delta", "index": index, "delta": delta},
                    "content_block_delta",
                )
            )
        events.append(sse({"type": "content_block_stop", "index": index}, "content_block_stop"))
    stop = stop_reason or ("tool_use" if calls else "end_turn")
    delta = {"stop_reason": stop, "stop_sequence": None}
    events.append(
        sse(
            {"type": "message_delta", "delta": delta, "usage": {"output_tokens": usage[1]}},
            "message_delta",
        )
    )
    events.append(sse({"type": "message_stop"}, "message_stop"))
    return Answer(events=events)
