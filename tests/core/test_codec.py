"""The stored form of a message: versioned, exact, and clear when it is not readable."""

from __future__ import annotations

import json

import pytest

from steerable import (
    CorruptRecord,
    InvalidMessage,
    Message,
    Reasoning,
    Text,
    ToolCall,
    ToolResult,
    codec,
)


def test_every_part_round_trips() -> None:
    message = Message(
        "assistant",
        (
            Reasoning("hmm", "anthropic", '{"signature": "x"}'),
            Text("nul \x00 and emoji 😀"),
            ToolCall("c", "f", '{"z":1,"a":[1, 2],"z":3}'),
        ),
    )
    results = Message("user", (ToolResult("c", "f", "boom", True),), steered=False)
    for m in (message, results, Message("user", (Text("s"),), id="s1", steered=True)):
        assert codec.decode(m.id, codec.encode(m)) == m


def test_the_stored_text_has_a_version_and_no_raw_control_characters() -> None:
    text = codec.encode(Message("user", (Text("a\x00b\nc"),), id="i"))
    assert text.startswith('{"v":1,')
    assert "\x00" not in text and "\n" not in text


def test_text_that_is_not_unicode_is_refused() -> None:
    with pytest.raises(InvalidMessage, match="not valid Unicode"):
        codec.encode(Message("user", (Text("\udc80"),)))


def _stored_as_ever(message: Message) -> str:
    """The stored text as every version wrote it (non-ASCII characters kept as they are)."""
    return json.dumps(json.loads(codec.encode(message)), ensure_ascii=False, separators=(",", ":"))


@pytest.mark.parametrize(
    "text",
    [
        "".join(map(chr, range(128))),  # every ASCII character, controls and DEL included
        'a "quoted" \\ back\\slash \\u00e9 not an escape',
        '{"query": "caf\\u00e9", "n": 1}',  # raw arguments with their own escapes
        "café, naïve, 日本語, emoji 😀, and DEL \x7f",
        "",
    ],
)
def test_the_stored_text_is_the_same_whichever_way_it_is_encoded(text: str) -> None:
    # encode takes a faster road for ASCII text; the bytes stored must not change with it
    call = ToolCall("c", "f", text)
    for message in (Message("user", (Text(text),)), Message("assistant", (call,))):
        stored = codec.encode(message)
        assert stored == _stored_as_ever(message)
        assert codec.decode(message.id, stored) == message


def test_every_character_below_0x800_is_stored_as_before() -> None:
    for point in range(0x800):
        message = Message("user", (Text(f"x{chr(point)}y"),), id="i")
        assert codec.encode(message) == _stored_as_ever(message), hex(point)


@pytest.mark.parametrize(
    "body",
    [
        "",
        "[]",
        '{"v":1}',
        '{"v":1,"role":"user","parts":[{"t":"video"}]}',
        '{"v":1,"role":"x","parts":[]}',
    ],
)
def test_unreadable_bodies_are_corrupt_records(body: str) -> None:
    with pytest.raises(CorruptRecord, match="at here"):
        codec.decode("id", body, where="here")
