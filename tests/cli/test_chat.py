"""The chat's pieces without a terminal: configuration, tools, resuming, late steers."""

from __future__ import annotations

import asyncio
import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from steerable import Message, ScriptedModel, Spec, ToolResult, user
from steerable.cli.chat import Conversation, load_tools
from steerable.cli.terminal import Terminal
from steerable.errors import UsageError
from steerable.models.base import ModelRequest
from steerable.models.scripted import call
from steerable.session import Session, open_session
from steerable.stores.memory import MemoryStore
from tests.models.wire import WireServer, chat_stream, json_answer

ROOT = Path(__file__).resolve().parents[2]


def chat_command(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
    env.pop("STEERABLE_MODEL", None)
    command = [sys.executable, "-m", "steerable.cli", "chat", "--store", str(tmp_path / "c.db")]
    return subprocess.run(
        [*command, *args],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_with_no_model_it_says_how_to_configure_one_and_exits_non_zero(tmp_path: Path) -> None:
    done = chat_command(tmp_path)
    assert done.returncode == 2
    assert "no model is configured" in done.stderr
    assert "--model" in done.stderr and "OPENAI_API_KEY" in done.stderr
    assert "--base-url" in done.stderr
    assert not (tmp_path / "c.db").exists()


def test_a_model_without_its_key_says_which_key_and_exits_non_zero(tmp_path: Path) -> None:
    done = chat_command(tmp_path, "--model", "anthropic:claude-sonnet-4-5")
    assert done.returncode == 2
    assert "ANTHROPIC_API_KEY" in done.stderr


def test_bad_tools_are_told_before_anything_runs(tmp_path: Path) -> None:
    done = chat_command(tmp_path, "--model", "openai:m", "--tools", "examples.tools.slow:NOPE")
    assert done.returncode == 2
    assert "has no attribute 'NOPE'" in done.stderr


def test_load_tools_takes_a_module_or_a_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    names = [getattr(t, "name", "") for t in load_tools("examples.tools.slow:TOOLS")]
    assert names == ["search_files", "read_file", "run_build"]
    [one] = load_tools(f"{ROOT / 'examples' / 'tools' / 'slow.py'}:run_build")
    assert getattr(one, "name", "") == "run_build"
    with pytest.raises(UsageError, match="module:attribute"):
        load_tools("examples.tools.slow")
    with pytest.raises(UsageError, match="cannot import"):
        load_tools("no_such_module_here:TOOLS")


def conversation(session: Session, model: ScriptedModel, out: io.StringIO) -> Conversation:
    spec = Spec(session=session)
    return Conversation(session, spec, model, Terminal(out))


async def test_a_steer_sent_after_the_last_step_is_answered_as_a_turn_of_its_own() -> None:
    session = open_session("s", MemoryStore())

    async def answer_while_a_steer_arrives(request: ModelRequest) -> str:
        await session.steer("one more thing", id="late")  # the final answer is being written
        return "first answer"

    model = ScriptedModel([answer_while_a_steer_arrives, "second answer"])
    out = io.StringIO()
    await conversation(session, model, out).turn([user("hello")])

    stored = await session.messages()
    assert [m.text for m in stored] == ["hello", "first answer", "one more thing", "second answer"]
    assert stored[2].steered
    assert await session.steers() == []
    assert "answering it now" in out.getvalue()
    assert "[steer taken] one more thing" in out.getvalue()


async def test_started_on_a_turn_left_halfway_it_carries_the_turn_on() -> None:
    session = open_session("s", MemoryStore())
    halfway = [
        user("find it"),
        Message("assistant", (call("search", id="c1"),)),
        Message("user", (ToolResult("c1", "search", "found"),)),
    ]
    await session.save(halfway)
    model = ScriptedModel(["done"])
    out = io.StringIO()
    chat = conversation(session, model, out)
    chat.terminal.lines.put_nowait(None)  # then the input ends
    await chat.greet("scripted", Path("memory"))
    await chat.main()

    assert [m.id for m in model.requests[0].messages] == [m.id for m in halfway]
    assert "resumed: 3 messages so far" in out.getvalue()
    assert "carrying on the interrupted turn" in out.getvalue()
    assert [m.text for m in await session.messages()][-1] == "done"


def test_piped_input_is_answered_before_the_chat_leaves(tmp_path: Path) -> None:
    with WireServer(chat_stream(["Hello ", "there."]), chat_stream(["Queued answer."])) as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
        command = [sys.executable, "-m", "steerable.cli", "chat", "--store", str(tmp_path / "c.db")]
        model = ["--model", "openai:m", "--base-url", f"{server.url}/v1"]
        done = subprocess.run(
            [*command, *model],
            cwd=ROOT,
            env=env,
            input="hi\n/queue and then?\n",
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 0, done.stderr
    assert "Hello there." in done.stdout and "Queued answer." in done.stdout
    assert [b["messages"][-1]["content"] for b in server.bodies] == ["hi", "and then?"]


async def test_started_on_a_turn_killed_before_its_first_answer_it_carries_the_turn_on() -> None:
    # The loop saves the prompt before the first request: a kill then leaves just that.
    session = open_session("s", MemoryStore())
    await session.save([user("find it", id="prompt")])
    model = ScriptedModel(["found it"])
    out = io.StringIO()
    chat = conversation(session, model, out)
    chat.terminal.lines.put_nowait(None)
    await chat.greet("scripted", Path("memory"))
    await chat.main()

    assert [m.id for m in model.requests[0].messages] == ["prompt"]
    assert "carrying on the interrupted turn" in out.getvalue()
    assert [m.text for m in await session.messages()] == ["find it", "found it"]


def piped(tmp_path: Path, server: WireServer, text: str, *args: str) -> Any:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
    command = [sys.executable, "-m", "steerable.cli", "chat", "--store", str(tmp_path / "c.db")]
    model = ["--model", "openai:m", "--base-url", f"{server.url}/v1", *args]
    return subprocess.run(
        [*command, *model],
        cwd=ROOT,
        env=env,
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_failed_only_turn_exits_non_zero_in_a_line_or_two(tmp_path: Path) -> None:
    with WireServer(strict=True) as server:  # it has no answer: a 500 with a detail
        done = piped(tmp_path, server, "hi\n")
    assert done.returncode == 1, done.stdout
    [failed] = [line for line in done.stdout.splitlines() if "[failed]" in line]
    assert "the test server has no answer left" in failed
    assert f"{server.url}/v1/chat/completions" in failed


def test_no_usage_reported_is_said_and_a_cut_reply_is_flagged(tmp_path: Path) -> None:
    answers = [chat_stream(["Half an"], finish="length"), chat_stream(["Whole."])]
    with WireServer(*answers, strict=True) as server:  # strict: no usage is ever sent
        done = piped(tmp_path, server, "one\ntwo\n")
    assert done.returncode == 0, done.stderr
    assert "0 tokens" not in done.stdout
    assert done.stdout.count("usage not reported") == 2
    assert "[cut short: the reply hit max_tokens]" in done.stdout


def test_the_chat_settings_for_compatible_servers_reach_the_request(tmp_path: Path) -> None:
    with WireServer(chat_stream(["ok"]), strict=True) as server:
        tools = ["--tools", "examples.tools.slow:TOOLS"]
        done = piped(tmp_path, server, "hi\n", "--tool-choice", "auto", "--no-stream", *tools)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok" in done.stdout
    [body] = server.bodies
    assert (body["tool_choice"], body["stream"]) == ("auto", False)


def test_base_url_help_names_every_openai_api() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "steerable.cli", "chat", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "openai-responses:" in " ".join(done.stdout.split())


def test_a_server_that_cannot_stream_tools_is_told_once_and_an_empty_answer_is_shown(
    tmp_path: Path,
) -> None:
    # The strict server answers a streamed request with tools with an empty stream: the
    # chat asks again unstreamed and says why once; the model's empty answer is said too.
    with WireServer(chat_stream([]), chat_stream(["Second."]), strict=True) as server:
        tools = ["--tools", "examples.tools.slow:TOOLS"]
        done = piped(tmp_path, server, "hi\nagain\n", *tools)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("[note]") == 1
    assert "empty stream for a request with tools" in done.stdout
    assert done.stdout.count("[the model's answer was empty]") == 1
    assert "Second." in done.stdout
    assert [b["stream"] for b in server.bodies] == [True, False, False]


def test_the_note_comes_before_the_answer_it_explains(tmp_path: Path) -> None:
    # said when the chat learns it, not after the (unstreamed, maybe minutes long) answer
    with WireServer(chat_stream(["The whole answer."]), strict=True) as server:
        tools = ["--tools", "examples.tools.slow:TOOLS"]
        done = piped(tmp_path, server, "hi\n", *tools)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("[note]") == 1
    assert done.stdout.index("[note]") < done.stdout.index("The whole answer.")


def test_max_tokens_and_temperature_reach_the_request(tmp_path: Path) -> None:
    with WireServer(chat_stream(["ok"])) as server:
        done = piped(tmp_path, server, "hi\n", "--max-tokens", "64", "--temperature", "0.3")
    assert done.returncode == 0, done.stdout + done.stderr
    [body] = server.bodies
    assert (body["max_tokens"], body["temperature"]) == (64, 0.3)


def test_compact_summarizes_and_the_next_turn_is_sent_the_summary(tmp_path: Path) -> None:
    answers = [chat_stream(["Four."]), chat_stream(["They asked 2+2."]), chat_stream(["Five."])]
    with WireServer(*answers) as server:
        done = piped(tmp_path, server, "2+2?\n/compact\n")  # typed during the turn: after it
        again = piped(tmp_path, server, "and 2+3?\n")  # a new chat on the same session
    assert done.returncode == 0, done.stdout + done.stderr
    assert "compacting once this turn ends" in done.stdout and "[compacted]" in done.stdout
    assert "carrying on" not in again.stdout  # a compaction is not a turn left halfway
    assert "Five." in again.stdout
    summary, after = server.bodies[1], server.bodies[2]
    assert "2+2?" in summary["messages"][-1]["content"] and "tools" not in summary
    texts = [m["content"] for m in after["messages"]]
    assert len(texts) == 2 and texts[0].endswith("They asked 2+2.") and texts[1] == "and 2+3?"


def test_a_context_overflow_names_the_way_out(tmp_path: Path) -> None:
    full = "This model's maximum context length is 2048 tokens. However, you requested 2400."
    with WireServer(json_answer(400, {"error": {"message": full}})) as server:
        done = piped(tmp_path, server, "hi\n")
    assert done.returncode == 1
    assert "maximum context length is 2048" in done.stdout
    assert "/compact" in done.stdout and "--session NEW" in done.stdout


def test_a_stream_cut_off_mid_answer_says_the_connection_dropped(tmp_path: Path) -> None:
    broken = chat_stream(["Half ", "an answer"])
    broken.drop_after = 3  # the role chunk and the two pieces: then the server is gone
    with WireServer(broken) as server:
        done = piped(tmp_path, server, "hi\n")
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    [failed] = [line for line in lines if "[failed]" in line]
    assert "could not connect" not in failed
    assert "the connection dropped mid-answer" in failed
    assert f"{server.url}/v1/chat/completions" in failed
    assert lines.index("Half an answer") < lines.index(failed)


async def test_a_stopped_turn_is_carried_on_without_a_terminal_to_ask() -> None:
    # A stopped turn is marked as the user's doing; piped input cannot be asked, so the
    # chat started again carries it on as it always did, and says so.
    session = open_session("s", MemoryStore())

    async def stopped_while_asked(request: ModelRequest) -> str:
        assert first.run is not None
        first.run.stop()
        await asyncio.sleep(5)
        return "never"

    first = conversation(session, ScriptedModel([stopped_while_asked]), io.StringIO())
    await first.turn([user("find it", id="prompt")])
    model = ScriptedModel(["found it"])
    out = io.StringIO()
    again = conversation(session, model, out)
    again.terminal.lines.put_nowait(None)
    await again.main()

    assert [m.id for m in model.requests[0].messages] == ["prompt"]
    assert "carrying on the turn you stopped (no terminal to ask)" in out.getvalue()
    assert [m.text for m in await session.messages()] == ["find it", "found it"]


async def test_a_request_that_shows_nothing_for_a_while_is_said_to_wait_once() -> None:
    session = open_session("s", MemoryStore())

    async def slow(request: ModelRequest) -> str:
        await asyncio.sleep(0.3)
        return "at last"

    out = io.StringIO()
    chat = conversation(session, ScriptedModel([slow, "quick"]), out)
    chat.terminal.wait = 0.05  # five seconds on a pipe
    await chat.turn([user("take your time")])
    await chat.turn([*await session.messages(), user("and now quickly")])
    shown = out.getvalue().splitlines()
    assert shown.count("  waiting for the reply...") == 1
    assert shown.index("  waiting for the reply...") < shown.index("at last")
