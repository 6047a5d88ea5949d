"""Every kind of part has its shape in the HTTP views."""

from __future__ import annotations

from steerable import Message, Native, Reasoning, Text, ToolCall, ToolResult
from steerable.service.http._models import message_out
from steerable.service_store import Entry


def test_each_part_kind_is_rendered_and_a_frameworks_record_shows_its_text_only() -> None:
    message = Message(
        "assistant",
        (
            Text("hi"),
            Reasoning("hmm", "anthropic", '{"secret":1}'),
            ToolCall("c1", "search", '{"q":1}'),
            Native("openai-agents", '{"type":"message","raw":true}', "the answer"),
        ),
        id="m1",
    )
    result = Message("user", (ToolResult("c1", "search", "found", True),), id="m2")
    out = [message_out(Entry(0, message, "t")), message_out(Entry(1, result, "t"))]
    parts = [p.model_dump() for o in out for p in o.parts]
    assert parts == [
        {"type": "text", "text": "hi"},
        {"type": "reasoning", "text": "hmm"},
        {"type": "tool_call", "id": "c1", "name": "search", "arguments": '{"q":1}'},
        {"type": "native", "framework": "openai-agents", "text": "the answer"},
        {
            "type": "tool_result",
            "call_id": "c1",
            "name": "search",
            "content": "found",
            "is_error": True,
        },
    ]
