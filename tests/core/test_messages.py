"""What a message reads as: its text, and a framework's records' text."""

from __future__ import annotations

from steerable import Message, Native, Reasoning, Text, ToolCall


def test_text_joins_text_parts_and_readable_adds_native_records() -> None:
    message = Message(
        "assistant",
        (
            Reasoning("thinking", "anthropic"),
            Text("a"),
            Native("pydantic-ai", '{"parts":[]}', "b"),
            ToolCall("c", "f", "{}"),
            Text("c"),
        ),
    )
    assert message.text == "ac"
    assert message.readable == "abc"
    assert message.tool_calls == [ToolCall("c", "f", "{}")]
    assert message.natives("pydantic-ai") == [Native("pydantic-ai", '{"parts":[]}', "b")]
    assert message.natives("adk") == []
