"""``steerable chat --url`` in a real terminal (tmux), against three ``steerable serve``.

Three replicas over one SQLite file behind a round-robin TCP balancer (each connection to
the next replica), so the chat's stream, its POSTs and the turn's holder are on replicas
of their own. The agent's tool notes each call and waits for the test's gate file, which
makes "a line typed during a tool call" certain rather than a race with a timer: the line
is a steer, taken at the next step, and the screen says so; ``/queue`` sends a turn of its
own; ``/stop`` stops. (The screen shows a tool call once its step is stored, after it ran:
the service's live feed carries text deltas only.)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from steerable import Spec, Tool, tool
from steerable.service import ReActAgent
from steerable.service.demo import DemoModel
from tests.cli.test_chat_terminal import Terminal
from tests.cli.test_serve import ROOT, Served
from tests.stores.relay import Relay

pytestmark = pytest.mark.slow
needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")


def _note_call(calls: Path, step: int) -> None:
    with calls.open("a", encoding="utf-8") as file:
        file.write(f"{step}\n")


def _gated_work() -> Tool:
    async def work(step: int) -> str:
        """Do one step of work: it ends once the test opens the gate."""
        gate = Path(os.environ["STEERABLE_TEST_GATE"])
        await asyncio.to_thread(_note_call, Path(f"{gate}.calls"), step)  # the test waits on it
        for _ in range(1200):  # a minute at most, so a broken test cannot hang here
            if await asyncio.to_thread(gate.exists):
                return f"step {step} done"
            await asyncio.sleep(0.05)
        return "the gate never opened"

    return tool(work)


def gated_agent() -> ReActAgent:
    """The replicas' agent (``--agent tests.cli.test_chat_url:gated_agent``): two gated
    ``work`` calls a turn, then an answer naming every user message of the turn."""
    spec = Spec(tools=[_gated_work()], max_steps=6)
    return ReActAgent(spec, DemoModel(calls=2))


class RoundRobin(Relay):
    """A TCP balancer: each new connection goes to the next of ``ports``."""

    def __init__(self, ports: list[int]) -> None:
        self.ports, self.turn = ports, 0
        super().__init__("127.0.0.1", ports[0])

    @property
    def upstream(self) -> int:
        """The next replica's port (read once per connection)."""
        port = self.ports[self.turn % len(self.ports)]
        self.turn += 1
        return port

    @upstream.setter
    def upstream(self, value: int) -> None:
        pass  # the ports are the list's


@contextlib.contextmanager
def balancer(ports: list[int]) -> Iterator[RoundRobin]:
    """A :class:`RoundRobin` on a thread's event loop, for the length of the block."""
    loop = asyncio.new_event_loop()
    relay = RoundRobin(ports)
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(relay.restore(), loop).result(10)
    try:
        yield relay
    finally:
        asyncio.run_coroutine_threadsafe(relay.cut(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[Terminal]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
    env.update({"NO_COLOR": "1", "TERM": "xterm"})
    term = Terminal(env)
    yield term
    term.close()


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[list[Served]]:
    """Three replicas over one SQLite file, serving the gated agent."""
    store = f"sqlite:///{tmp_path / 'service.db'}"
    env = {"STEERABLE_TEST_GATE": str(tmp_path / "gate")}
    agent = ("--agent", "tests.cli.test_chat_url:gated_agent", "--poll", "0.1")
    started = [
        Served(store, *agent, "--replica-id", f"r{n}", log=tmp_path / f"r{n}.log", env=env)
        for n in (1, 2, 3)
    ]
    try:
        for server in started:
            server.start()
        yield started
    finally:
        for server in started:
            server.kill()


def calls_made(tmp_path: Path, count: int) -> None:
    """Wait until the agent's tool has been called ``count`` times (the gate's file)."""
    calls = tmp_path / "gate.calls"
    deadline = time.monotonic() + 30
    while not calls.exists() or len(calls.read_text().splitlines()) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"the tool was not called {count} times")
        time.sleep(0.05)


async def _transcript(url: str, session: str) -> list[dict[str, Any]]:
    from steerable.service.client import Client

    async with Client(url) as client:
        messages: list[dict[str, Any]] = (await client.transcript(session))["messages"]
        return messages


@needs_tmux
def test_a_steer_typed_during_a_tool_call_is_taken_at_the_next_step_on_three_replicas(
    terminal: Terminal, replicas: list[Served], tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    with balancer([r.port for r in replicas]) as lb:
        url = f"http://127.0.0.1:{lb.port}"
        terminal.start(f"{sys.executable} -m steerable.cli chat --url {url} --session s1")
        terminal.shows("you>")
        terminal.type("find the config")
        calls_made(tmp_path, 1)  # the tool runs, until the gate opens
        terminal.type("also check the tests")
        terminal.shows("[steer sent] offered to turn")
        terminal.type("/queue then summarise")
        terminal.shows("queued: it becomes a turn of its own")
        gate.touch()
        screen = terminal.shows("answered: find the config | also check the tests")
        assert "[steer taken at step 2] also check the tests" in screen
        before, _, after = screen.partition("[steer taken at step 2]")
        assert "<- work: step 1 done" in before  # taken after the tool's result ...
        assert '-> work({"step": 2})' in after  # ... and before the next request's reply
        assert any(f"on r{n}]" in screen for n in (1, 2, 3))  # the holder is named
        terminal.shows("answered: then summarise")

        # /stop, through whichever replica the balancer picks, stops the turn where it runs.
        gate.unlink()
        terminal.type("long job")
        calls_made(tmp_path, 5)  # two calls each of the first two turns, then this one's
        terminal.type("/stop")
        terminal.shows("[stopped] (turn")
        terminal.type("/quit")
        terminal.shows("chat exited 0")

    # The steer sits in the stored transcript right after the first tool's result.
    messages = asyncio.run(_transcript(replicas[1].url, "s1"))
    texts = [(m["role"], m["steered"], m["parts"][0].get("type")) for m in messages[:5]]
    assert texts == [
        ("user", False, "text"),
        ("assistant", False, "tool_call"),
        ("user", False, "tool_result"),
        ("user", True, "text"),
        ("assistant", False, "tool_call"),
    ]
    assert messages[3]["parts"][0]["text"] == "also check the tests"
    # The balancer spread the chat's connections: more than one replica answered it.
    assert sum("/v1/sessions/s1" in r.text() for r in replicas) >= 2


# -- a service that fails: one line, and the chat still ends ---------------------------------


class Failing(BaseHTTPRequestHandler):
    """A service with no session yet whose ``fail`` routes answer a 500 problem.

    ``refuse`` makes the event stream (not the client's ask for the last event, an id far
    beyond) a 401, and a POST accepted.
    """

    fail: tuple[str, ...] = ()
    refuse = False

    def do_GET(self) -> None:
        following = int(self.headers.get("Last-Event-ID") or 0) < 2**40
        if self.path.endswith("/events") and following and self.refuse:
            self._answer("events", 401, "unauthorized")
        else:
            self._answer("events" if self.path.endswith("/events") else "read")

    def do_POST(self) -> None:
        sent = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        if self.refuse:
            self._answer("post", 200, "", {"id": sent["id"], "turn": sent["id"], "state": "queued"})
        else:
            self._answer("post")

    def _answer(self, route: str, status: int = 0, code: str = "", body: object = None) -> None:
        if not status:
            failed = route in self.fail
            status, code = (500, "internal_error") if failed else (404, "session_not_found")
        problem = {"status": status, "code": code, "detail": f"{route} failed"}
        data = json.dumps(problem if body is None else body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/problem+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def failing(*routes: str, refuse: bool = False) -> Iterator[str]:
    """The URL of a :class:`Failing` service failing ``routes``, for the block."""
    handler = type("Handler", (Failing,), {"fail": routes, "refuse": refuse})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def chat(*flags: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """``steerable chat --url ...`` with piped input, run to its end."""
    env = {k: v for k, v in os.environ.items() if k != "STEERABLE_TOKEN"}
    return subprocess.run(
        [sys.executable, "-m", "steerable.cli", "chat", *flags],
        cwd=ROOT,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_a_send_that_fails_is_said_and_the_end_of_input_still_ends_the_chat() -> None:
    with failing("post") as url:
        done = chat("--url", url, "--session", "s1", stdin="hi\n/queue later\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("[error] HTTP 500 internal_error: post failed") == 2
    assert "Traceback" not in done.stderr


def test_a_stream_refusing_the_token_is_said_and_ends_the_chat_with_status_2() -> None:
    with failing(refuse=True) as url:  # the send is taken; its turn is never told
        done = chat("--url", url, "--session", "s1", stdin="hi\n")
    assert done.returncode == 2, done.stderr
    assert "[error] HTTP 401 unauthorized: events failed" in done.stdout
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (("--token", "t\u00e9"), "a token is printable ASCII"),
        (("--token", "a b"), "a token is printable ASCII"),
        (("--session", "a/b"), "a session id is"),
        (("--session", ".."), "a session id is"),
    ],
)
def test_a_token_or_session_the_api_cannot_carry_is_one_line_and_status_2(
    flags: tuple[str, ...], says: str
) -> None:
    with failing() as url:
        done = chat("--url", url, "--session", "s1", *flags)
    assert done.returncode == 2, done.stderr
    assert says in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_service_that_fails_at_the_start_is_one_line_and_status_2() -> None:
    with failing("read") as url:
        done = chat("--url", url, "--session", "s1", stdin="hi\n")
    assert done.returncode == 2, done.stderr
    assert "HTTP 500 internal_error: read failed" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
