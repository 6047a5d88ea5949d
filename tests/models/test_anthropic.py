"""Anthropic's Messages API over real HTTP: the official SDK against a local wire server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from steerable import Message, Runner, Spec, assistant, transcript_problems, user
from steerable.errors import ProviderError
from steerable.events import Event, TextDelta
from steerable.messages import Reasoning, Text, ToolCall, ToolResult
from steerable.models.anthropic import AnthropicModel
from steerable.models.base import ModelSettings, Usage
from steerable.session import open_session
from steerable.stores.sqlite import SQLiteStore
from tests.models.gate import Gate, run_with_steer
from tests.models.wire import (
    Answer,
    WireServer,
    anthropic_error,
    anthropic_stream,
    redacted_thinking_block,
    sse,
    text_block,
    thinking_block,
    tool_use_block,
)

PIECES = ['{"q": "con', 'fig 🦀"', ', "n": 2', "}"]
ARGUMENTS = "".join(PIECES)
SIGNATURE = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"


def model(server: WireServer, **options: Any) -> AnthropicModel:
    return AnthropicModel("claude-test", base_url=server.url, api_key="sk-ant-test", **options)


def expected_tools() -> list[dict[str, Any]]:
    return [
        {
            "name": "search",
            "description": "Search the files for ``q``.",
            "input_schema": {
                "additionalProperties": False,
                "properties": {"q": {"type": "string"}, "n": {"default": 1, "type": "integer"}},
                "required": ["q"],
                "type": "object",
            },
        }
    ]


async def test_thinking_goes_back_verbatim_and_the_steer_joins_the_tool_result_turn() -> None:
    gate = Gate()
    first = anthropic_stream(
        thinking_block(["The user wants ", "the config."], SIGNATURE),
        redacted_thinking_block("EmwKAhgBEgy3va3pzix/LafPsn4a"),
        text_block("Let me ", "look."),
        tool_use_block("toolu_1", "search", *PIECES),
        usage=(50, 30),
    )
    second = anthropic_stream(text_block("It is ", "config.toml."), usage=(90, 6))
    with WireServer(first, second) as server:
        thinking = {"thinking": {"type": "enabled", "budget_tokens": 1024}}
        spec = Spec(
            tools=[gate.tool],
            instructions="Be brief.",
            settings=ModelSettings(max_tokens=2048, extra=thinking),
        )
        async with model(server) as m:
            result = await run_with_steer(spec, "find the config", m, gate, "and the tests")

    assert result.reason == "completed", result.error
    assert result.output == "It is config.toml."
    assert result.usage == Usage(140, 36, 2)
    reply = result.transcript[1]
    assert reply.parts[2:] == (Text("Let me look."), ToolCall("toolu_1", "search", ARGUMENTS))
    thought = reply.parts[0]
    assert isinstance(thought, Reasoning)
    assert (thought.provider, thought.text) == ("anthropic", "The user wants the config.")
    assert json.loads(thought.data) == {
        "type": "thinking",
        "thinking": "The user wants the config.",
        "signature": SIGNATURE,
    }

    assert [r.path for r in server.requests] == ["/v1/messages"] * 2
    headers = server.requests[0].headers
    assert "sk-ant-test" in (headers.get("x-api-key"), headers.get("authorization", "")[7:])
    common = {
        "model": "claude-test",
        "max_tokens": 2048,
        "system": "Be brief.",
        "tools": expected_tools(),
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "stream": True,
    }
    prompt = {"role": "user", "content": [{"type": "text", "text": "find the config"}]}
    assert server.bodies[0] == {**common, "messages": [prompt]}
    assert server.bodies[1] == {
        **common,
        "messages": [
            prompt,
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "thinking",
                        "thinking": "The user wants the config.",
                        "signature": SIGNATURE,
                    },
                    {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"},
                    {"type": "text", "text": "Let me look."},
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "search",
                        "input": {"q": "config 🦀", "n": 2},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": "2 hit for config 🦀: config.toml",
                    },
                    {"type": "text", "text": "and the tests"},
                ],
            },
        ],
    }


async def test_text_deltas_stream_and_the_stored_reply_is_whole() -> None:
    events: list[Event] = []
    with WireServer(anthropic_stream(text_block("Hel", "lo"))) as server:
        async with model(server) as m:
            result = await Runner.run(Spec(), "hi", m, events=events.append)
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Hel", "lo"]
    assert result.transcript[-1].parts == (Text("Hello"),)
    assert server.bodies[0]["max_tokens"] == 8192  # the API requires one; ours by default


async def test_a_tool_error_and_unparsable_arguments_are_sent_as_the_api_wants() -> None:
    gate = Gate()
    gate.release.set()
    cut = anthropic_stream(
        tool_use_block("toolu_1", "search", '{"q": "trunc'), stop_reason="max_tokens"
    )
    with WireServer(cut, anthropic_stream(text_block("sorry"))) as server:
        async with model(server) as m:
            result = await Runner.run(Spec(tools=[gate.tool]), "go", m)
    assert result.transcript[1].tool_calls == [ToolCall("toolu_1", "search", '{"q": "trunc')]
    turns = server.bodies[1]["messages"]
    assert turns[1]["content"] == [
        {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {}}
    ]
    [tool_result] = turns[2]["content"]
    assert tool_result["is_error"] is True
    assert '{"q": "trunc' in tool_result["content"]


async def test_429_529_and_an_overloaded_stream_are_retried() -> None:
    overloaded = Answer(
        events=[
            sse({"type": "ping"}, "ping"),
            sse(
                {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
                "error",
            ),
        ]
    )
    with WireServer(
        anthropic_error(429, "rate limited", "rate_limit_error", retry_after="1"),
        anthropic_error(529, "Overloaded", "overloaded_error", retry_after="1"),
        overloaded,
        anthropic_stream(text_block("fine")),
    ) as server:
        async with model(server, max_retries=3) as m:
            result = await Runner.run(Spec(), "hi", m)
    assert result.reason == "completed", result.error
    assert result.output == "fine"
    assert len(server.requests) == 4
    assert server.requests[1].at - server.requests[0].at >= 0.95  # Retry-After, not 0.5 s
    assert server.requests[2].at - server.requests[1].at >= 0.95
    assert all(body == server.bodies[0] for body in server.bodies)


async def test_the_prefill_error_fails_the_run_and_loses_nothing(tmp_path: Path) -> None:
    message = (
        "This model does not support assistant message prefill. The conversation must end"
        " with a user message."
    )
    async with SQLiteStore(tmp_path / "s.db") as store:
        session = open_session("s", store)
        given = [user("hi"), assistant("Sure, here it is:")]
        with WireServer(anthropic_error(400, message)) as server:
            async with model(server) as m:
                result = await Runner.run(Spec(session=session), given, m)
        stored = await open_session("s", store).messages()
    assert result.reason == "failed"
    assert isinstance(result.error, ProviderError)
    assert (result.error.status, result.error.message) == (400, message)
    assert list(result.transcript) == given and not transcript_problems(result.transcript)
    assert stored == given
    assert len(server.requests) == 1
    assert server.bodies[0]["messages"][-1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "Sure, here it is:"}],
    }


async def test_other_providers_reasoning_is_not_sent_to_anthropic() -> None:
    foreign = Message(
        "assistant",
        (Reasoning("hmm", "openai-responses", "[]"), ToolCall("c1", "search", "{}")),
    )
    given = [user("go"), foreign, Message("user", (ToolResult("c1", "search", "none"),))]
    with WireServer(anthropic_stream(text_block("ok"))) as server:
        async with model(server) as m:
            await Runner.run(Spec(), given, m)
    assert server.bodies[0]["messages"][1]["content"] == [
        {"type": "tool_use", "id": "c1", "name": "search", "input": {}}
    ]


async def test_a_stop_while_the_reply_streams_closes_the_request_and_keeps_no_half_reply() -> None:
    slow = anthropic_stream(text_block(*[f"word{i} " for i in range(200)]))
    slow.pause = 0.02
    events: list[Event] = []
    with WireServer(slow) as server:
        async with model(server) as m:
            run = Runner.start(Spec(), "talk", m, events=events.append)
            async for event in run.events():
                if isinstance(event, TextDelta):
                    run.stop()
            result = await run
    assert result.reason == "stopped"
    assert [m.text for m in result.transcript] == ["talk"]  # no half reply kept
    assert 0 < len([e for e in events if isinstance(e, TextDelta)]) < 200
    assert not transcript_problems(result.transcript)


async def test_a_reply_cut_by_max_tokens_says_so() -> None:
    answers = [anthropic_stream(text_block("Half an"), stop_reason="max_tokens")]
    answers.append(anthropic_stream(text_block("Whole.")))
    with WireServer(*answers) as server:
        async with model(server) as m:
            cut = await Runner.run(Spec(), "go", m)
            whole = await Runner.run(Spec(), "go", m)
    assert (cut.reason, cut.finish_reason) == ("completed", "length")
    assert whole.finish_reason == "stop"


async def test_a_connection_error_names_the_url_it_tried() -> None:
    with WireServer() as server:
        url = server.url  # closed once the block ends: nothing listens there any more
    async with AnthropicModel("m", base_url=url, api_key="t", max_retries=0) as m:
        result = await Runner.run(Spec(), "go", m)
    assert isinstance(result.error, ProviderError) and result.error.status is None
    assert f"{url}/v1/messages" in str(result.error)
