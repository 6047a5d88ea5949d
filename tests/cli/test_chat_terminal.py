"""``steerable chat`` in a real terminal (tmux), against a local Chat Completions server.

A line typed while a tool runs reaches the model as a steer, right after the tool's result;
``/queue`` makes the next turn; the chat started again resumes the session, and ``/stop``
stops a turn and leaves the transcript valid. The screen stays clean: ``/help`` mid-answer on
lines of its own, a stopped answer's text above ``[stopped]``, a stopped call's ``<-`` line,
a waiting line for an unstreamed request (whose HTTP request ``/stop`` closes); a turn left
by ``/quit`` is carried on only when the user says so.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from steerable import transcript_problems
from steerable.stores.sqlite import SQLiteStore
from tests.models.wire import WireServer, chat_stream

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")


class Terminal:
    """A tmux server of our own (its own socket), one window running one command at a time."""

    def __init__(self, env: dict[str, str]) -> None:
        self.socket = f"steerable-test-{uuid.uuid4().hex[:12]}"
        self.env = env

    def tmux(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-L", self.socket, *args],
            capture_output=True,
            text=True,
            env=self.env,
            check=False,
            timeout=10,
        )
        if done.returncode != 0:
            raise AssertionError(f"tmux {args[0]} failed: {done.stderr.strip()}")
        return done.stdout

    def start(self, command: str) -> None:
        # The shell keeps the pane open after the chat exits, with its exit status shown.
        shell = f"{command}; echo chat exited $?; sleep 600"
        self.tmux(
            "new-session", "-d", "-s", "chat", "-x", "150", "-y", "60", "-c", str(ROOT), shell
        )

    def type(self, line: str) -> None:
        self.tmux("send-keys", "-t", "chat", "-l", line)
        self.tmux("send-keys", "-t", "chat", "Enter")

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-J", "-t", "chat", "-S", "-")

    def wait_for(self, check: Callable[[str], bool], what: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if check(screen):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"the chat never showed {what}; the screen:\n{screen}")
            time.sleep(0.05)

    def shows(self, text: str, timeout: float = 30) -> str:
        return self.wait_for(lambda screen: text in screen, repr(text), timeout)

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, check=False)
        # A server being killed may still hold its socket: the next start gets a new one.
        self.socket = f"steerable-test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[Terminal]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
    env.pop("STEERABLE_MODEL", None)
    env.update({"STEERABLE_TEST_GATE": str(tmp_path / "gate"), "NO_COLOR": "1", "TERM": "xterm"})
    term = Terminal(env)
    yield term
    term.close()


def prompt_count(screen: str) -> int:
    return sum(1 for line in screen.splitlines() if line.startswith("you>"))


def messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return list(body["messages"])


def test_a_line_typed_during_a_tool_call_is_a_steer_and_the_session_resumes(
    terminal: Terminal, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    database = tmp_path / "chat.db"
    call = ("call_1", "inspect_repo", ['{"path": "con', 'fig"}'])
    with WireServer(
        chat_stream(["Let me look."], [call]),
        chat_stream(["It is config.toml."]),
        chat_stream(["Summary: one file."]),
        chat_stream([], [("call_2", "inspect_repo", ['{"path": "tests"}'])]),
    ) as server:
        command = (
            f"{sys.executable} -m steerable.cli chat --session s1 --store {database}"
            f" --model openai:test-model --base-url {server.url}/v1"
            " --tools tests.cli.gated_tools:TOOLS --tools examples.tools.slow:TOOLS"
        )
        terminal.start(command)
        terminal.shows("you>")
        terminal.type("find the config")
        terminal.shows("-> inspect_repo(")
        terminal.type("also check the tests")
        terminal.shows("[steer sent]")
        terminal.type("/queue then summarise")
        terminal.shows("queued as the next turn")
        gate.touch()
        screen = terminal.shows("Summary: one file.")
        assert "[steer taken] also check the tests" in screen
        assert "It is config.toml." in screen
        assert "you> then summarise  (queued)" in screen

        # The steer reached the model right after the tool's result, in the next request.
        assert len(server.requests) == 3
        second = messages(server.bodies[1])
        assert second[-3]["tool_calls"][0]["function"]["arguments"] == '{"path": "config"}'
        assert second[-2] == {
            "role": "tool",
            "tool_call_id": "call_1",
            "content": "config: config.toml, 12 lines",
        }
        assert second[-1] == {"role": "user", "content": "also check the tests"}
        third = messages(server.bodies[2])
        assert third[:-2] == second
        assert third[-2:] == [
            {"role": "assistant", "content": "It is config.toml."},
            {"role": "user", "content": "then summarise"},
        ]
        terminal.wait_for(lambda s: prompt_count(s) == 3, "a third prompt")
        terminal.type("/quit")
        terminal.shows("chat exited 0")

        # Started again, the chat resumes the session: the model gets the whole transcript.
        terminal.close()
        gate.unlink()
        terminal.start(command)
        terminal.shows("resumed: 7 messages so far")
        terminal.type("and now?")
        terminal.shows("-> inspect_repo(")
        fourth = messages(server.bodies[3])
        assert fourth[:-1] == [*third, {"role": "assistant", "content": "Summary: one file."}]
        assert fourth[-1] == {"role": "user", "content": "and now?"}
        terminal.type("/stop")
        screen = terminal.shows("[stopped]")
        terminal.type("/quit")
        terminal.shows("chat exited 0")
    assert len(server.requests) == 4

    stored = asyncio.run(_stored(database))
    assert not transcript_problems(stored)
    assert stored[-1].tool_results[0].is_error  # the call /stop cut short says so
    assert "stopped" in stored[-1].tool_results[0].content


async def _stored(database: Path) -> list[Any]:
    async with SQLiteStore(database) as store:
        return list(await store.messages("s1"))


def test_killed_during_its_first_tool_call_the_chat_carries_the_turn_on(
    terminal: Terminal, tmp_path: Path
) -> None:
    gate, database, pid = tmp_path / "gate", tmp_path / "chat.db", tmp_path / "pid"
    call = ("call_1", "inspect_repo", ['{"path": "config"}'])
    with WireServer(
        chat_stream(["Let me look."], [call]),
        chat_stream(["Let me look."], [("call_2", "inspect_repo", ['{"path": "config"}'])]),
        chat_stream(["It is config.toml."]),
    ) as server:
        chat = (
            f"{sys.executable} -m steerable.cli chat --session s1 --store {database}"
            f" --model openai:test-model --base-url {server.url}/v1"
            " --tools tests.cli.gated_tools:TOOLS"
        )
        terminal.start(f"sh -c 'echo $$ > {pid}; exec {chat}'")
        terminal.shows("you>")
        terminal.type("find the config")
        terminal.shows("-> inspect_repo(")
        os.kill(int(pid.read_text()), signal.SIGKILL)
        terminal.shows("chat exited 137")

        terminal.close()
        gate.touch()
        terminal.start(chat)
        terminal.shows("resumed: 1 messages so far")
        terminal.shows("carrying on the interrupted turn")
        terminal.shows("It is config.toml.")
        terminal.type("/quit")
        terminal.shows("chat exited 0")
    assert len(server.requests) == 3
    first, again = messages(server.bodies[0]), messages(server.bodies[1])
    assert again == first == [{"role": "user", "content": "find the config"}]
    stored = asyncio.run(_stored(database))
    assert [m.text for m in stored][-1] == "It is config.toml."
    assert not transcript_problems(stored)


def test_a_line_typed_while_the_answer_streams_stays_out_of_the_answer(
    terminal: Terminal, tmp_path: Path
) -> None:
    words = "The answer streams in many small pieces, one every little while, to its end."
    streaming = chat_stream([*[f"{w} " for w in words.split()][:-1], "end."])
    streaming.pause = 0.15
    with WireServer(streaming, chat_stream(["Steered."])) as server:
        terminal.start(
            f"{sys.executable} -m steerable.cli chat --session s1 --store {tmp_path / 'c.db'}"
            f" --model openai:test-model --base-url {server.url}/v1"
        )
        terminal.shows("you>")
        terminal.type("go on")
        terminal.shows("The answer streams")
        terminal.type("steer me")
        screen = terminal.shows("Steered.")
        terminal.type("/quit")
        terminal.shows("chat exited 0")
    assert words in screen  # whole, on its line: nothing typed got into it
    assert "steer> steer me" in screen
    assert messages(server.bodies[1])[-1] == {"role": "user", "content": "steer me"}


def chat_command(server_url: str, database: Path, *args: str) -> str:
    return (
        f"{sys.executable} -m steerable.cli chat --session s1 --store {database}"
        f" --model openai:test-model --base-url {server_url}/v1 {' '.join(args)}"
    )


def slow_answer(words: str, pause: float) -> Any:
    streaming = chat_stream([*[f"{w} " for w in words.split()][:-1], words.split()[-1]])
    streaming.pause = pause
    return streaming


def line_of(screen: str, text: str) -> int:
    """The index of the first line of ``screen`` that holds ``text``."""
    return next(i for i, line in enumerate(screen.splitlines()) if text in line)


def test_help_typed_while_the_answer_streams_is_shown_on_lines_of_its_own(
    terminal: Terminal, tmp_path: Path
) -> None:
    words = "The answer streams in many small pieces, one every little while, to its end."
    with WireServer(slow_answer(words, 0.15)) as server:
        terminal.start(chat_command(server.url, tmp_path / "c.db"))
        terminal.shows("you>")
        terminal.type("go on")
        terminal.shows("The answer streams")
        terminal.type("/help")
        screen = terminal.shows("(11 tokens in, 7 out)")
        terminal.type("/quit")
        terminal.shows("chat exited 0")
    lines = screen.splitlines()
    help_line = line_of(screen, "a line while the agent works")
    assert lines[help_line].startswith("  a line while the agent works")  # not in the answer
    assert lines[line_of(screen, "/queue TEXT")].startswith("  /queue TEXT")
    assert words in lines[line_of(screen, "The answer streams")]  # the answer went on, whole
    assert help_line < line_of(screen, "The answer streams")  # the help came mid-answer


def test_after_stop_the_streamed_text_stays_above_the_stopped_note(
    terminal: Terminal, tmp_path: Path
) -> None:
    words = "The answer streams in many small pieces, one every little while, to its end."
    with WireServer(slow_answer(words, 0.3)) as server:
        terminal.start(chat_command(server.url, tmp_path / "c.db"))
        terminal.shows("you>")
        terminal.type("go on")
        terminal.shows("The answer streams in")
        terminal.type("/stop")
        terminal.shows("[stopped]")
        time.sleep(0.5)  # anything the chat would draw after the note
        screen = terminal.screen()
        terminal.type("/quit")
        terminal.shows("chat exited 0")
    lines = screen.splitlines()
    stopped = line_of(screen, "[stopped]")
    assert line_of(screen, "The answer streams in") < stopped
    assert lines[line_of(screen, "The answer streams in")].startswith("The answer streams in")
    after = [line for line in lines[stopped + 1 :] if line.strip()]
    assert after == ["you>"], after  # nothing of the answer below the note


def test_a_tool_call_cut_short_by_stop_shows_its_error_result(
    terminal: Terminal, tmp_path: Path
) -> None:
    call = ("call_1", "inspect_repo", ['{"path": "config"}'])
    with WireServer(chat_stream(["Let me look."], [call])) as server:
        terminal.start(
            chat_command(server.url, tmp_path / "c.db", "--tools", "tests.cli.gated_tools:TOOLS")
        )
        terminal.shows("you>")
        terminal.type("find the config")
        terminal.shows("-> inspect_repo(")
        terminal.type("/stop")
        screen = terminal.shows("[stopped]")
        terminal.type("/quit")
        terminal.shows("chat exited 0")
    shown = "<- inspect_repo [error]: the run was stopped before this call ended"
    assert line_of(screen, "-> inspect_repo(") < line_of(screen, shown)
    assert line_of(screen, shown) < line_of(screen, "[stopped]")


def test_a_turn_left_by_quit_is_carried_on_only_when_the_user_says_so(
    terminal: Terminal, tmp_path: Path
) -> None:
    database = tmp_path / "chat.db"
    call = ("call_1", "inspect_repo", ['{"path": "config"}'])
    with WireServer(chat_stream(["Let me look."], [call]), chat_stream(["Done."])) as server:
        command = chat_command(server.url, database, "--tools", "tests.cli.gated_tools:TOOLS")
        terminal.start(command)
        terminal.shows("you>")
        terminal.type("find the config")
        terminal.shows("-> inspect_repo(")
        terminal.type("/quit")
        terminal.shows("chat exited 0")

        # Started again, it asks; Enter (no) leaves the turn as it was.
        terminal.close()
        terminal.start(command)
        terminal.shows("carry it on? [y/N]")
        time.sleep(0.3)
        assert len(server.requests) == 1
        terminal.type("")
        terminal.shows("left as it was")
        terminal.type("/quit")
        terminal.shows("chat exited 0")
        assert len(server.requests) == 1

        # Asked again, "y" carries it on from the stored transcript.
        terminal.close()
        terminal.start(command)
        terminal.shows("carry it on? [y/N]")
        terminal.type("y")
        terminal.shows("Done.")
        terminal.type("/quit")
        terminal.shows("chat exited 0")
    assert len(server.requests) == 2
    second = messages(server.bodies[1])
    assert second[0] == {"role": "user", "content": "find the config"}
    assert second[-1]["role"] == "tool" and "stopped" in second[-1]["content"]
    stored = asyncio.run(_stored(database))
    assert [m.text for m in stored][-1] == "Done."
    assert not transcript_problems(stored)


class HangingServer:
    """A server that takes each request and never answers; it records when the client
    hangs up (its connection closed)."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.arrived: list[float] = []
        self.closed: list[float] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._listener.getsockname()[:2]
        return f"http://{host}:{port}"

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._hold, args=(connection,), daemon=True).start()

    def _hold(self, connection: socket.socket) -> None:
        connection.settimeout(60)
        with connection:
            try:
                if connection.recv(65536):
                    self.arrived.append(time.monotonic())
                    while connection.recv(65536):
                        pass
            except OSError:
                pass
            self.closed.append(time.monotonic())

    def __enter__(self) -> HangingServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._listener.close()


def test_an_unstreamed_request_shows_it_waits_and_stop_closes_it(
    terminal: Terminal, tmp_path: Path
) -> None:
    with HangingServer() as server:
        terminal.start(chat_command(server.url, tmp_path / "c.db", "--no-stream"))
        terminal.shows("you>")
        terminal.type("take your time")
        terminal.shows("waiting for the whole reply")
        terminal.wait_for(lambda s: "waiting for the whole reply... 2 s" in s, "the seconds")
        assert len(server.arrived) == 1 and not server.closed
        stopped = time.monotonic()
        terminal.type("/stop")
        screen = terminal.shows("[stopped]")
        deadline = time.monotonic() + 5
        while not server.closed and time.monotonic() < deadline:
            time.sleep(0.05)
        # The request was closed, so the server stops generating: promptly, not at exit.
        assert server.closed and server.closed[0] - stopped < 2, server.closed
        time.sleep(0.3)
        assert "waiting for" not in terminal.screen().splitlines()[-1]
        terminal.type("/quit")
        terminal.shows("chat exited 0")
    assert "waiting for" not in screen.split("[stopped]")[-1]
