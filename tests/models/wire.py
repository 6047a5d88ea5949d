"""A local HTTP server on loopback that speaks the providers' wire formats, SSE included.

It answers each request with the next entry of its script and records every request
exactly as it arrived (path, headers, body bytes), so a test drives the unmodified SDK
clients against it and asserts on what went over the wire. An answer can be an error with
``Retry-After``, an SSE stream cut off after some events (the connection drops with the
chunked body incomplete), or a hang-up before any answer.

The builders below write each provider's stream the way the provider does: OpenAI Chat
Completions (``data:`` lines, ``[DONE]``), OpenAI Responses and Anthropic Messages (named
``event:`` lines).

``WireServer(..., strict=True)`` answers Chat Completions the way the stricter compatible
servers do (llama-cpp-python's, the model for it; others share parts of it): a message
with ``"content": null`` is refused with a 500 and a many-line validation report; tools
sent without ``tool_choice`` are dropped (the model answers in text); a streamed request
with ``tool_choice: "auto"`` gets an empty stream; ``"required"`` a bare 500; no usage is
ever reported; an unstreamed request gets the scripted stream folded into one completion; errors are
``{"detail": ...}``. A refusal does not use up the script's next answer.
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
from typing import Any, Self, cast


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

    def __init__(
        self, *answers: AnswerLike, strict: bool = False, props: dict[str, Any] | None = None
    ) -> None:
        self._answers: deque[AnswerLike] = deque(answers)
        self.strict = strict
        self.props = props  # GET /props answers it (llama-server's), else a 404
        self.gets: list[str] = []  # the paths of the GET requests
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
        refused = strict_refusal(request) if self.strict else None
        with self._lock:
            self.requests.append(request)
            entry = self._answers.popleft() if self._answers and refused is None else None
        if refused is not None:
            return strict_answer(request, refused)
        if entry is None:
            if self.strict:
                return json_answer(500, {"detail": "the test server has no answer left"})
            return json_answer(500, {"error": {"message": "the test server has no answer left"}})
        answer = entry(request) if callable(entry) else entry
        return strict_answer(request, answer) if self.strict else answer

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

        def do_GET(self) -> None:
            server.gets.append(self.path)
            found = self.path == "/props" and server.props is not None
            body = json.dumps(server.props if found else {"error": "not found"}).encode()
            self.send_response(200 if found else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

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


def detail_error(status: int, detail: Any) -> Answer:
    """An error the way FastAPI-based servers write one: ``{"detail": ...}``."""
    return json_answer(status, {"detail": detail})


# -- the strict server's ways -------------------------------------------------------------


def strict_refusal(request: Recorded) -> Answer | None:
    """What a strict server answers instead of the script, if anything."""
    if not request.path.endswith("/chat/completions"):
        return None
    body = request.json
    for index, message in enumerate(body.get("messages", ())):
        if "content" in message and message["content"] is None:
            return detail_error(500, _null_content_report(index, message.get("role")))
    if body.get("tools") and body.get("tool_choice") == "required":
        return Answer(500, {"Content-Type": "text/plain"}, b"")  # its assertion fails
    if body.get("tools") and body.get("stream") and body.get("tool_choice") == "auto":
        return Answer(events=[])  # "automatic streaming tool choice is not supported"
    if body.get("tools") and "tool_choice" not in body:
        return chat_stream(["I have no tools to call."])  # the model never saw them
    return None


def _null_content_report(index: int, role: object) -> str:
    # The shape of a schema validator's report: many lines, most of them about other roles.
    lines = [f"{len(_ROLES)} validation errors for ChatCompletionRequest"]
    for other in _ROLES:
        lines += [
            f"messages.{index}.{other}.content",
            "  Input should be a valid string [type=string_type, input_value=None,"
            " input_type=NoneType]",
            "    For further information visit the validator's documentation",
        ]
    lines.append(f"(the message's role was {role!r})")
    return "\n".join(lines)


_ROLES = (
    "ChatCompletionRequestSystemMessage",
    "ChatCompletionRequestUserMessage",
    "ChatCompletionRequestAssistantMessage",
    "ChatCompletionRequestToolMessage",
)


def strict_answer(request: Recorded, answer: Answer) -> Answer:
    """The scripted answer as a strict server sends it: no usage; folded when unstreamed."""
    if answer.events is None or not request.path.endswith("/chat/completions"):
        return answer
    chunks = [c for c in map(_chunk_of, answer.events) if c is not None]
    if not request.json.get("stream"):
        return json_answer(200, fold(chunks))
    kept = [
        e
        for e, c in zip(answer.events, map(_chunk_of, answer.events), strict=True)
        if c is None or "usage" not in c
    ]
    return Answer(answer.status, answer.headers, answer.body, kept, answer.drop_after, answer.pause)


def _chunk_of(event: bytes) -> dict[str, Any] | None:
    data = event.decode().partition("data: ")[2].strip()
    if not data or data == "[DONE]":
        return None
    return cast(dict[str, Any], json.loads(data))


def fold(chunks: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Streamed chunks as the one completion an unstreamed request gets (no usage)."""
    text: list[str] = []
    reasoning: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    finish: str | None = None
    for chunk in chunks:
        for choice in chunk.get("choices", ()):
            delta = choice.get("delta", {})
            text.append(delta.get("content") or "")
            reasoning.append(delta.get("reasoning_content") or "")
            for piece in delta.get("tool_calls", ()):
                call = calls.setdefault(
                    piece["index"], {"id": piece.get("id"), "type": "function", "function": {}}
                )
                function = call["function"]
                function["name"] = function.get("name") or piece["function"].get("name")
                function["arguments"] = function.get("arguments", "") + (
                    piece["function"].get("arguments") or ""
                )
            finish = choice.get("finish_reason") or finish
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
    if any(reasoning):
        message["reasoning_content"] = "".join(reasoning)
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    choice = {"index": 0, "message": message, "finish_reason": finish or "stop"}
    return {**_CHUNK, "object": "chat.completion", "choices": [choice]}


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
