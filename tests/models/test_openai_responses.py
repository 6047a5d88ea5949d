"""OpenAI's Responses API over real HTTP: the official SDK against a local wire server."""

from __future__ import annotations

import json
from typing import Any

from steerable import Runner, Spec, transcript_problems, user
from steerable.errors import ProviderError
from steerable.events import Event, TextDelta
from steerable.messages import Reasoning, Text, ToolCall
from steerable.models.base import ModelRequest, ModelSettings, Usage
from steerable.models.openai import OpenAIResponsesModel
from tests.models.gate import Gate, run_with_steer
from tests.models.wire import (
    WireServer,
    call_item,
    message_item,
    openai_error,
    reasoning_item,
    responses_stream,
)

PIECES = ['{"q":', ' "con', 'fig 🦀"', ',"q":"tests"}']
ARGUMENTS = "".join(PIECES)


def model(server: WireServer) -> OpenAIResponsesModel:
    return OpenAIResponsesModel("test-model", base_url=f"{server.url}/v1", api_key="sk-test")


def expected_tools() -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "name": "search",
            "description": "Search the files for ``q``.",
            "parameters": {
                "additionalProperties": False,
                "properties": {"q": {"type": "string"}, "n": {"default": 1, "type": "integer"}},
                "required": ["q"],
                "type": "object",
            },
            "strict": False,
        }
    ]


async def test_reasoning_items_go_back_verbatim_with_the_steer_after_the_result() -> None:
    gate = Gate()
    thought = reasoning_item("rs_1", "Look in the repo first.", "gAAAA-encrypted==")
    call = call_item("fc_1", "call_1", "search", PIECES)
    first = responses_stream(thought, message_item("msg_1", ["On ", "it."]), call, usage=(40, 20))
    second = responses_stream(message_item("msg_2", ["Found ", "it."]), usage=(80, 5))
    with WireServer(first, second) as server:
        spec = Spec(
            tools=[gate.tool],
            instructions="Be brief.",
            settings=ModelSettings(max_tokens=500, extra={"reasoning": {"effort": "low"}}),
        )
        async with model(server) as m:
            result = await run_with_steer(spec, "find the config", m, gate, "and the tests")

    assert result.reason == "completed", result.error
    assert result.output == "Found it."
    assert result.usage == Usage(120, 25, 2)
    reply = result.transcript[1]
    assert reply.parts[1:] == (Text("On it."), ToolCall("call_1", "search", ARGUMENTS))
    reasoning = reply.parts[0]
    assert isinstance(reasoning, Reasoning)
    assert (reasoning.provider, reasoning.text) == ("openai-responses", "Look in the repo first.")

    assert [r.path for r in server.requests] == ["/v1/responses"] * 2
    common = {
        "model": "test-model",
        "instructions": "Be brief.",
        "tools": expected_tools(),
        "max_output_tokens": 500,
        "reasoning": {"effort": "low"},
        "stream": True,
    }
    prompt = {"role": "user", "content": "find the config"}
    assert server.bodies[0] == {**common, "input": [prompt]}
    assert server.bodies[1] == {
        **common,
        "input": [
            prompt,
            # the reply's own items, ids and encrypted content included, as they came
            thought.item,
            message_item("msg_1", ["On it."]).item,
            call.item,
            {
                "type": "function_call_output",
                "call_id": "call_1",
                "output": "1 hit for tests: config.toml",
            },
            {"role": "user", "content": "and the tests"},
        ],
    }
    assert json.dumps(ARGUMENTS, ensure_ascii=False) in server.requests[1].body.decode()


async def test_a_reply_without_reasoning_is_sent_back_from_its_parts() -> None:
    gate = Gate()
    gate.release.set()
    first = responses_stream(call_item("fc_1", "call_1", "search", PIECES))
    with WireServer(first, responses_stream(message_item("m", ["ok"]))) as server:
        async with model(server) as m:
            result = await Runner.run(Spec(tools=[gate.tool]), "go", m)
    assert result.transcript[1].parts == (ToolCall("call_1", "search", ARGUMENTS),)
    assert server.bodies[1]["input"][1:] == [
        {"type": "function_call", "call_id": "call_1", "name": "search", "arguments": ARGUMENTS},
        {
            "type": "function_call_output",
            "call_id": "call_1",
            "output": "1 hit for tests: config.toml",
        },
    ]


async def test_text_deltas_stream_and_the_stored_reply_is_whole() -> None:
    events: list[Event] = []
    with WireServer(responses_stream(message_item("m", ["a", "b", "c"]))) as server:
        async with model(server) as m:
            result = await Runner.run(Spec(), "hi", m, events=events.append)
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["a", "b", "c"]
    assert result.transcript[-1].parts == (Text("abc"),)


async def test_a_400_ends_the_run_as_failed_and_leaves_the_transcript_as_it_was() -> None:
    refused = openai_error(400, "Item 'rs_1' of type 'reasoning' was provided without its item.")
    with WireServer(refused) as server:
        async with model(server) as m:
            result = await Runner.run(Spec(), "hi", m)
    assert result.reason == "failed"
    assert isinstance(result.error, ProviderError) and result.error.status == 400
    assert "without its item" in result.error.message
    assert len(result.transcript) == 1 and not transcript_problems(result.transcript)


async def test_a_503_is_retried() -> None:
    busy = openai_error(503, "busy", headers={"Retry-After": "1"})
    with WireServer(busy, responses_stream(message_item("m", ["ok"]))) as server:
        async with model(server) as m:
            result = await Runner.run(Spec(), "hi", m)
    assert result.output == "ok"
    assert len(server.requests) == 2


async def test_the_finish_reason_says_whether_the_reply_called_tools() -> None:
    calls = responses_stream(call_item("fc_1", "c1", "search", ['{"q": "x"}']))
    with WireServer(calls, responses_stream(message_item("m_1", ["Done."]))) as server:
        async with model(server) as m:
            request = ModelRequest(None, (user("go"),))
            replies = [[e async for e in m.stream(request)][-1] for _ in range(2)]
    assert [getattr(r, "finish_reason", None) for r in replies] == ["tool_calls", "stop"]
