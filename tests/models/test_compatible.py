"""Chat Completions against the servers people point ``--base-url`` at first.

The wire server's strict mode behaves as llama-cpp-python's server does (see
``tests/models/wire.py``); the OpenAI-shaped mode as OpenAI does. A conversation with two
tool calls, a steer from another process and a SIGKILL in the middle passes against both,
each with the settings docs/models.md gives for it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from steerable import Message, ModelSettings, Runner, Spec, tool, transcript_problems, user
from steerable.compaction import is_context_overflow
from steerable.errors import ProviderError
from steerable.models.openai import OpenAIChatModel
from steerable.stores.sqlite import SQLiteStore
from tests.models.compatible_worker import PROMPT, SESSION
from tests.models.wire import (
    Answer,
    Recorded,
    WireServer,
    chat_stream,
    detail_error,
    json_answer,
    strict_answer,
)

ROOT = Path(__file__).resolve().parents[2]
STEER = "and the tests"


@tool
async def search(q: str) -> str:
    """Search the files."""
    return f"found {q}"


def as_asked(answer: Answer) -> Callable[[Recorded], Answer]:
    """``answer`` streamed if the request asks for a stream, else folded into one completion."""
    return lambda request: strict_answer(request, answer)


def model(server: WireServer, **options: Any) -> OpenAIChatModel:
    return OpenAIChatModel("m", base_url=f"{server.url}/v1", api_key="test", **options)


def script() -> list[Any]:
    search_call = ("call_1", "search", ['{"q": "con', 'fig"}'])
    read_call = ("call_2", "read", ['{"path": "config.toml"}'])
    return [
        chat_stream(["Looking."], [search_call]),
        chat_stream([], [read_call]),  # the worker is killed while it runs this call
        chat_stream([], [("call_3", "read", ['{"path": "config.toml"}'])]),  # the step redone
        chat_stream(["It is config.toml, 12 lines; the tests read it."]),
    ]


def wait_for(path: Path, worker: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 30
    while not path.exists():
        if worker.poll() is not None or time.monotonic() > deadline:
            output = worker.communicate(timeout=5)[0] if worker.poll() is not None else ""
            raise AssertionError(f"{path.name} never appeared; the worker said: {output}")
        time.sleep(0.02)


def start(mode: str, url: str, database: Path, gates: Path) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "tests.models.compatible_worker", "run", mode]
    return subprocess.Popen(
        [*command, f"{url}/v1", str(database), str(gates)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["openai", "strict"])
def test_two_tool_calls_a_steer_from_elsewhere_and_a_sigkill(mode: str, tmp_path: Path) -> None:
    database, gates = tmp_path / "chat.db", tmp_path / "gates"
    gates.mkdir()
    with WireServer(*script(), strict=mode == "strict") as server:
        first = start(mode, server.url, database, gates)
        wait_for(gates / "search-started", first)
        steer = [sys.executable, "-m", "tests.models.compatible_worker", "steer"]
        subprocess.run([*steer, str(database), STEER], cwd=ROOT, check=True, timeout=60)
        (gates / "search-go").touch()
        wait_for(gates / "read-started", first)
        os.kill(first.pid, signal.SIGKILL)
        first.communicate(timeout=30)
        (gates / "read-go").touch()
        second = start(mode, server.url, database, gates)
        output = second.communicate(timeout=60)[0]
    assert second.returncode == 0, output
    assert "completed: It is config.toml, 12 lines" in output

    bodies = server.bodies
    assert len(bodies) == 4  # no refusal, no retry
    messages = [b["messages"] for b in bodies]
    assert messages[1][-2:] == [
        {"role": "tool", "tool_call_id": "call_1", "content": "found config.toml"},
        {"role": "user", "content": STEER},
    ]
    assert messages[2] == messages[1]  # the step redone after the kill asks the same
    assert messages[3][-2]["content"] == ""  # a reply of tool calls only
    assert all(m.get("content") is not None for ms in messages for m in ms)
    for body in bodies:
        assert [t["function"]["name"] for t in body["tools"]] == ["search", "read"]
        assert body["tool_choice"] == "auto"  # the default, said: a strict server needs it
        assert body["stream"] is (mode != "strict")

    stored = asyncio.run(_stored(database))
    assert not transcript_problems(stored)
    assert stored[0].text == PROMPT
    assert stored[3].steered and stored[3].text == STEER
    assert [c.id for m in stored for c in m.tool_calls] == ["call_1", "call_3"]


async def _stored(database: Path) -> list[Message]:
    async with SQLiteStore(database) as store:
        return list(await store.messages(SESSION))


async def test_a_strict_server_refuses_null_content_so_none_is_sent() -> None:
    # A text-less reply with a tool call, then the request that sends it back.
    answers = [chat_stream([], [("c1", "search", ['{"q": "x"}'])]), chat_stream(["done"])]
    with WireServer(*answers, strict=True) as server:
        async with model(server, tool_choice="auto", stream=False, max_retries=0) as m:
            result = await Runner.run(Spec(tools=[search]), "go", m)
    assert result.reason == "completed", result.error
    assert server.bodies[1]["messages"][1] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "search", "arguments": '{"q": "x"}'},
            }
        ],
    }


async def test_tool_choice_is_auto_unless_set_and_sent_only_with_tools() -> None:
    answers = [chat_stream(["a"]), chat_stream(["b"]), chat_stream(["c"])]
    with WireServer(*answers) as server:
        async with model(server, tool_choice="required") as forced, model(server) as plain:
            await Runner.run(Spec(tools=[search]), "x", forced)
            await Runner.run(Spec(), "x", forced)
            await Runner.run(Spec(tools=[search]), "x", plain)
    assert [b.get("tool_choice") for b in server.bodies] == ["required", None, "auto"]


async def test_a_required_tool_choice_forces_the_first_call_of_each_turn_only() -> None:
    # forced on every request, a model could never answer: it calls tools until max_steps
    call = ("c1", "search", ['{"q": "x"}'])
    answers = [chat_stream([], [call]), chat_stream(["Found."])]
    with WireServer(*answers, *answers) as server:
        async with model(server, tool_choice="required") as forced:
            first = await Runner.run(Spec(tools=[search]), "go", forced)
            second = await Runner.run(
                Spec(tools=[search]), [*first.transcript, user("again")], forced
            )
    assert (first.output, second.output) == ("Found.", "Found.")
    assert [b["tool_choice"] for b in server.bodies] == ["required", "auto"] * 2


async def test_with_no_settings_a_strict_server_sees_the_tools_and_answers_unstreamed() -> None:
    # llama-cpp-python's server drops tools sent without tool_choice, and answers a streamed
    # request with tool_choice with an empty stream: the defaults get past both.
    answers = [chat_stream([], [("c1", "search", ['{"q": "x"}'])]), chat_stream(["Found x."])]
    with WireServer(*answers, strict=True) as server:
        async with model(server) as m:
            result = await Runner.run(Spec(tools=[search]), "go", m)
            notices = m.take_notices()
            again = m.take_notices()
    assert (result.reason, result.output) == ("completed", "Found x.")
    assert [(b["tool_choice"], b["stream"]) for b in server.bodies] == [
        ("auto", True),  # the empty stream
        ("auto", False),  # asked again at once, unstreamed
        ("auto", False),  # and the next request with tools unstreamed from the start
    ]
    assert len(notices) == 1 and "empty stream" in notices[0] and "--no-stream" in notices[0]
    assert again == []  # said once


async def test_a_server_whose_template_takes_no_tools_is_said_once() -> None:
    # llama-server with a chat template that knows no tools drops them without a word;
    # its /props says so, asked once, at the first request with tools
    props = {"chat_template_caps": {"supports_tools": False, "supports_tool_calls": False}}
    answers = [chat_stream(["I have no tools."]), chat_stream(["Still none."]), chat_stream(["x"])]
    with WireServer(*answers, props=props) as server:
        async with model(server) as m:
            await Runner.run(Spec(), "no tools: nothing asked", m)
            assert server.gets == []
            await Runner.run(Spec(tools=[search]), "go", m)
            await Runner.run(Spec(tools=[search]), "again", m)
            notices = m.take_notices()
    assert server.gets == ["/props"]
    assert len(notices) == 1 and "takes no tools" in notices[0] and "--jinja" in notices[0]


async def test_a_server_that_takes_tools_or_has_no_props_is_not_told_about() -> None:
    answers = [chat_stream(["a"]), chat_stream(["b"])]
    takes = {"chat_template_caps": {"supports_tools": True}}
    with WireServer(*answers, props=takes) as server, WireServer(*answers) as bare:
        async with model(server) as m, model(bare) as other:
            await Runner.run(Spec(tools=[search]), "go", m)
            await Runner.run(Spec(tools=[search]), "go", other)
            said = m.take_notices() + other.take_notices()
    assert said == []
    assert (server.gets, bare.gets) == (["/props"], ["/props"])  # the 404: no answer


async def test_an_empty_streamed_answer_with_tools_is_asked_for_whole_once() -> None:
    # llama-cpp-python's chatml-function-calling streams a text answer as chunks holding
    # nothing; unstreamed the answer is there: from then on, whole replies with tools
    answers = [chat_stream([]), chat_stream(["The answer."]), chat_stream(["Next."])]
    with WireServer(*map(as_asked, answers)) as server:
        async with model(server) as m:
            result = await Runner.run(Spec(tools=[search]), "go", m)
            later = await Runner.run(Spec(tools=[search]), "again", m)
            notices = m.take_notices()
    assert (result.output, later.output) == ("The answer.", "Next.")
    assert [b["stream"] for b in server.bodies] == [True, False, False]
    assert len(notices) == 1 and "empty answer" in notices[0]


async def test_an_answer_empty_both_ways_is_empty_and_nothing_is_learned() -> None:
    answers = [chat_stream([]), chat_stream([]), chat_stream(["Streamed."])]
    with WireServer(*map(as_asked, answers)) as server:
        async with model(server) as m:
            result = await Runner.run(Spec(tools=[search]), "go", m)
            later = await Runner.run(Spec(tools=[search]), "again", m)
            notices = m.take_notices()
    assert (result.reason, result.output, later.output) == ("completed", "", "Streamed.")
    assert [b["stream"] for b in server.bodies] == [True, False, True]
    assert notices == []


async def test_a_bare_500_for_a_forced_tool_call_says_to_try_auto() -> None:
    with WireServer(strict=True) as server:
        async with model(server, tool_choice="required", max_retries=0) as m:
            result = await Runner.run(Spec(tools=[search]), "go", m)
    assert result.reason == "failed" and isinstance(result.error, ProviderError)
    assert result.error.status == 500
    assert "no explanation in the answer" in result.error.message
    assert 'try tool_choice "auto"' in result.error.message


async def test_an_unstreamed_request_without_tools_still_streams() -> None:
    answers = [chat_stream([], [("c1", "search", ['{"q": "x"}'])]), chat_stream(["Found."])]
    with WireServer(*answers, chat_stream(["Plain."]), strict=True) as server:
        async with model(server) as m:
            await Runner.run(Spec(tools=[search]), "go", m)
            result = await Runner.run(Spec(), "no tools", m)
    assert result.output == "Plain."
    assert server.bodies[-1]["stream"] is True and "tools" not in server.bodies[-1]


async def test_an_empty_stream_is_asked_again_unstreamed_once_and_then_an_error() -> None:
    # no tools: nothing to remember, but the server may say unstreamed what it did
    with WireServer(Answer(events=[]), Answer(events=[]), strict=True) as server:
        async with model(server) as m:
            result = await Runner.run(Spec(), "go", m)
    assert result.reason == "failed"
    assert isinstance(result.error, ProviderError)
    assert "empty stream" in result.error.message
    assert [b["stream"] for b in server.bodies] == [True, False]  # once, not again


async def test_an_empty_stream_answered_unstreamed_is_the_reply() -> None:
    answers = [Answer(events=[]), chat_stream(["Plain."]), chat_stream(["Streamed."])]
    with WireServer(*answers, strict=True) as server:
        async with model(server) as m:
            result = await Runner.run(Spec(), "go", m)
            later = await Runner.run(Spec(), "again", m)
            notices = m.take_notices()
    assert (result.reason, result.output) == ("completed", "Plain.")
    assert later.output == "Streamed."
    assert notices == []  # nothing changed for later requests: nothing to say
    assert [b["stream"] for b in server.bodies] == [True, False, True]  # not remembered


async def test_a_context_overflow_streamed_as_an_empty_200_is_told_by_the_unstreamed_ask() -> None:
    # llama-cpp-python's server: the prompt is tokenized once the stream's 200 is sent, so a
    # prompt past the context is an empty stream; unstreamed it is this 400.
    overflow = json_answer(
        400,
        {
            "error": {
                "message": "This model's maximum context length is 2048 tokens. However, you"
                " requested 2264 tokens (2264 in your prompt; 0 for the completion).",
                "type": "invalid_request_error",
                "code": "context_length_exceeded",
            }
        },
    )
    with WireServer(Answer(events=[]), overflow) as server:
        async with model(server, max_retries=0) as m:
            result = await Runner.run(Spec(), "a long prompt", m)
    assert result.reason == "failed" and isinstance(result.error, ProviderError)
    assert result.error.status == 400
    assert is_context_overflow(result.error)
    assert "maximum context length is 2048 tokens" in result.error.message


async def test_a_detail_body_is_the_message_and_the_url_is_named() -> None:
    with WireServer(detail_error(404, "Model 'nope' not found")) as server:
        async with model(server) as m:
            result = await Runner.run(Spec(), "go", m)
    assert isinstance(result.error, ProviderError)
    assert result.error.status == 404
    message = str(result.error)
    assert "Model 'nope' not found" in message
    assert f"{server.url}/v1/chat/completions" in message
    assert "check the model name" in message


async def test_a_validation_report_is_cut_to_one_line() -> None:
    answers = [chat_stream(["x"])]
    with WireServer(*answers, strict=True) as server:
        async with model(server, max_retries=0) as m:
            # `extra` goes into the body as it is: here, a message the server refuses.
            null = {"messages": [{"role": "assistant", "content": None}]}
            result = await Runner.run(Spec(settings=ModelSettings(extra=null)), "go", m)
    assert isinstance(result.error, ProviderError) and result.error.status == 500
    message = str(result.error)
    assert "\n" not in message and len(message) < 400, message
    assert message.startswith("openai-chat answered 500: 4 validation errors"), message


async def test_a_connection_error_names_the_url_it_tried() -> None:
    with WireServer() as server:
        url = server.url  # closed once the block ends: nothing listens there any more
    async with OpenAIChatModel("m", base_url=f"{url}/v1", api_key="t", max_retries=0) as m:
        result = await Runner.run(Spec(), "go", m)
    assert isinstance(result.error, ProviderError) and result.error.status is None
    assert f"{url}/v1/chat/completions" in str(result.error)
    assert "is the server running" in str(result.error)
