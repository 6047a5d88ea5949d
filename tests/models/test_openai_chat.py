"""OpenAI Chat Completions over real HTTP: the official SDK against a local wire server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from steerable import Message, ModelSettings, Runner, Spec, transcript_problems, user
from steerable.errors import ProviderError
from steerable.events import Event, Replied, TextDelta
from steerable.messages import Reasoning, Text, ToolCall, ToolResult
from steerable.models.base import Usage
from steerable.models.openai import OpenAIChatModel
from steerable.session import open_session
from steerable.stores.sqlite import SQLiteStore
from tests.models.gate import Gate, run_with_steer
from tests.models.wire import Answer, WireServer, chat_stream, openai_error

# Odd spacing, a duplicate key, an escaped quote and an astral character, split mid-token:
# the joined arguments must come back exactly as streamed.
PIECES = ['{"q": "con', 'fig \\"main\\" 🦀",', '  "n":2, "n"', ":3}"]
ARGUMENTS = "".join(PIECES)


def model(server: WireServer, **options: Any) -> OpenAIChatModel:
    return OpenAIChatModel("test-model", base_url=f"{server.url}/v1", api_key="sk-test", **options)


def expected_tools() -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": "search",
                "description": "Search the files for ``q``.",
                "parameters": {
                    "additionalProperties": False,
                    "properties": {"q": {"type": "string"}, "n": {"default": 1, "type": "integer"}},
                    "required": ["q"],
                    "type": "object",
                },
            },
        }
    ]


async def test_request_bodies_tool_call_and_the_steer_after_its_result() -> None:
    gate = Gate()
    first = chat_stream(["Let me ", "look."], [("call_1", "search", PIECES)], usage=(30, 12))
    second = chat_stream(["config.toml ", "it is."], usage=(60, 8))
    with WireServer(first, second) as server:
        spec = Spec(
            tools=[gate.tool],
            instructions="Be brief.",
            settings=ModelSettings(temperature=0.2, max_tokens=300, extra={"seed": 7}),
        )
        async with model(server) as m:
            result = await run_with_steer(spec, "find the config", m, gate, "also check the tests")

    assert result.reason == "completed", result.error
    assert result.output == "config.toml it is."
    call = result.transcript[1].tool_calls[0]
    assert call == ToolCall("call_1", "search", ARGUMENTS)
    assert result.usage == Usage(90, 20, 2)

    assert [r.path for r in server.requests] == ["/v1/chat/completions"] * 2
    assert server.requests[0].headers["authorization"] == "Bearer sk-test"
    system = {"role": "system", "content": "Be brief."}
    prompt = {"role": "user", "content": "find the config"}
    common = {
        "model": "test-model",
        "tools": expected_tools(),
        "tool_choice": "auto",
        "temperature": 0.2,
        "max_completion_tokens": 300,
        "seed": 7,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    assert server.bodies[0] == {**common, "messages": [system, prompt]}
    assert server.bodies[1] == {
        **common,
        "messages": [
            system,
            prompt,
            {
                "role": "assistant",
                "content": "Let me look.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "search", "arguments": ARGUMENTS},
                    }
                ],
            },
            {
                "role": "tool",
                "tool_call_id": "call_1",
                "content": '3 hit for config "main" 🦀: config.toml',
            },
            {"role": "user", "content": "also check the tests"},
        ],
    }
    # The arguments went out as the very string the model streamed, not re-serialized.
    assert json.dumps(ARGUMENTS, ensure_ascii=False) in server.requests[1].body.decode()


async def test_text_deltas_reach_the_events_as_they_arrive() -> None:
    events: list[Event] = []
    with WireServer(chat_stream(["Hel", "lo ", "there"])) as server:
        async with model(server) as m:
            result = await Runner.run(Spec(), "hi", m, events=events.append)
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Hel", "lo ", "there"]
    assert [e.usage for e in events if isinstance(e, Replied)] == [Usage(11, 7, 1)]
    assert result.output == "Hello there"
    assert result.transcript[-1].parts == (Text("Hello there"),)


async def test_reasoning_content_is_kept_and_sent_back_to_the_server_that_sent_it() -> None:
    first = chat_stream([], [("c1", "search", ['{"q":"x"}'])], reasoning=["think", "ing"])
    gate = Gate()
    gate.release.set()
    with WireServer(first, chat_stream(["ok"])) as server:
        async with model(server) as m:
            result = await Runner.run(Spec(tools=[gate.tool]), "go", m)
    assert result.transcript[1].parts[0] == Reasoning("thinking", "openai-chat")
    assistant = server.bodies[1]["messages"][1]
    assert assistant == {
        "role": "assistant",
        "content": "",
        "reasoning_content": "thinking",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "search", "arguments": '{"q":"x"}'},
            }
        ],
    }


async def test_429_and_503_are_retried_as_retry_after_says() -> None:
    limited = openai_error(429, "slow down", headers={"Retry-After": "1"})
    unavailable = openai_error(503, "busy", headers={"Retry-After": "1"})
    with WireServer(limited, unavailable, chat_stream(["fine"])) as server:
        async with model(server) as m:
            result = await Runner.run(Spec(), "hi", m)
    assert result.reason == "completed", result.error
    assert result.output == "fine"
    assert len(server.requests) == 3
    assert server.bodies[0] == server.bodies[1] == server.bodies[2]
    assert [r.headers["x-stainless-retry-count"] for r in server.requests] == ["0", "1", "2"]
    # The SDK's own backoff would wait at most 0.5 s before the first retry: it waited
    # for Retry-After instead.
    assert server.requests[1].at - server.requests[0].at >= 0.95
    assert server.requests[2].at - server.requests[1].at >= 0.95


async def test_a_connection_dropped_before_the_answer_is_retried() -> None:
    with WireServer(Answer(hang_up=True), chat_stream(["fine"])) as server:
        async with model(server) as m:
            result = await Runner.run(Spec(), "hi", m)
    assert result.output == "fine"
    assert len(server.requests) == 2


async def test_a_stream_dropped_before_any_text_is_retried() -> None:
    broken = chat_stream(["never shown"])
    broken.drop_after = 1  # the role chunk only
    with WireServer(broken, chat_stream(["fine"])) as server:
        events: list[Event] = []
        async with model(server) as m:
            result = await Runner.run(Spec(), "hi", m, events=events.append)
    assert result.output == "fine"
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["fine"]
    assert len(server.requests) == 2


async def test_a_stream_dropped_after_text_was_shown_fails_the_run_cleanly() -> None:
    broken = chat_stream(["shown ", "then cut"])
    broken.drop_after = 2
    with WireServer(broken) as server:
        async with model(server) as m:
            result = await Runner.run(Spec(), "hi", m)
    assert result.reason == "failed"
    assert isinstance(result.error, ProviderError)
    assert result.error.retryable and result.error.status is None
    assert len(result.transcript) == 1 and not transcript_problems(result.transcript)


async def test_a_400_ends_the_run_as_failed_with_the_providers_message(tmp_path: Path) -> None:
    gate = Gate()
    gate.release.set()
    first = chat_stream([], [("c1", "search", ['{"q":"x"}'])])
    refused = openai_error(400, "Invalid 'messages[3]': something is off.")
    async with SQLiteStore(tmp_path / "s.db") as store:
        session = open_session("s", store)
        with WireServer(first, refused) as server:
            spec = Spec(tools=[gate.tool], session=session)
            async with model(server) as m:
                result = await Runner.run(spec, [user("go")], m)
        stored = await open_session("s", store).messages()
    assert result.reason == "failed"
    assert isinstance(result.error, ProviderError)
    assert result.error.status == 400 and not result.error.retryable
    url = f"{server.url}/v1/chat/completions"
    assert result.error.message == f"Invalid 'messages[3]': something is off. (POST {url})"
    assert "something is off" in str(result.error)
    assert len(server.requests) == 2  # a 400 is not retried
    # The transcript ends with the tool result: valid, stored whole, ready to resume.
    assert [m.role for m in result.transcript] == ["user", "assistant", "user"]
    assert isinstance(result.transcript[-1].parts[0], ToolResult)
    assert not transcript_problems(result.transcript)
    assert [m.id for m in stored] == [m.id for m in result.transcript]


async def test_401_names_the_problem() -> None:
    with WireServer(openai_error(401, "Incorrect API key provided.")) as server:
        async with model(server) as m:
            result = await Runner.run(Spec(), "hi", m)
    assert isinstance(result.error, ProviderError)
    assert result.error.status == 401
    assert result.error.message.startswith("Incorrect API key provided. (POST ")
    assert result.error.message.endswith("; check the API key")


async def test_a_compatible_server_without_a_key_gets_a_placeholder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with WireServer(chat_stream(["hi"])) as server:
        async with OpenAIChatModel("llama", base_url=f"{server.url}/v1") as compatible:
            result = await Runner.run(Spec(), [Message("user", (Text("hi"),))], compatible)
    assert result.output == "hi"
    assert server.requests[0].headers["authorization"] == "Bearer no-key"


async def test_a_reply_cut_by_max_tokens_says_so() -> None:
    answers = [chat_stream(["Half an"], finish="length"), chat_stream(["Whole."])]
    with WireServer(*answers) as server:
        async with model(server) as m:
            cut = await Runner.run(Spec(), "go", m)
            whole = await Runner.run(Spec(), "go", m)
    assert (cut.reason, cut.finish_reason, cut.output) == ("completed", "length", "Half an")
    assert whole.finish_reason == "stop"
