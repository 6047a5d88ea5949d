"""Every message part type of the installed pydantic_ai.messages, stored and loaded back.

The part types are read from Pydantic AI's own unions (``ModelRequestPart``,
``ModelResponsePart``): a type a new release adds has no sample here, and the first test
fails until it has one. Each sample is stored in a message of its own through
SteerableConversationStore and through Pydantic AI's InMemoryConversationStore, and loaded
back from both: identical means equal (``==``) and the same JSON.

One cannot be identical: ``RetryPromptPart``, deprecated, which Pydantic AI's own loader
(``ModelMessagesTypeAdapter``, which every serializing store goes through) translates into
what replaced it; only a store that keeps Python objects (InMemory deep-copies) gives it back.
"""

from __future__ import annotations

import typing
from datetime import UTC, datetime

import pytest
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import ConversationStore, InMemoryConversationStore
from pydantic_ai.messages import (
    AgentInstructionSource,
    BinaryContent,
    BinaryImage,
    CapabilityLoadDeltaPart,
    CompactionPart,
    FilePart,
    ImageUrl,
    InstructionBaselinePart,
    InstructionDeltaPart,
    InstructionId,
    InstructionPart,
    LoadCapabilityCallPart,
    LoadCapabilityReturnPart,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ModelResponsePart,
    ModelSettingsDeltaPart,
    NativeToolCallPart,
    NativeToolReturnPart,
    NativeToolSearchCallPart,
    NativeToolSearchReturnPart,
    RetryFeedbackPart,
    RetryInfo,
    RetryPromptPart,
    SpeechPart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolAvailabilityDeltaPart,
    ToolCallPart,
    ToolReturnPart,
    ToolSearchCallPart,
    ToolSearchReturnPart,
    UserPromptPart,
)
from pydantic_ai.usage import RequestUsage

from steerable import Store
from steerable.integrations.pydantic_ai import SteerableConversationStore

# The deprecated part is a sample on purpose (InMemory's deep copy builds it again, too).
pytestmark = pytest.mark.filterwarnings("ignore:`RetryPromptPart` is deprecated")

WHEN = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
PNG = BinaryImage(data=b"\x89PNG\r\n\x1a\n\x00\xff", media_type="image/png")


def _part_types(union: object) -> set[type]:
    """The classes of a Pydantic AI part union (its members unwrapped of their annotations)."""
    found: set[type] = set()
    for member in typing.get_args(typing.get_args(union)[0]):
        kind = typing.get_args(member)[0]
        while not isinstance(kind, type):
            kind = typing.get_args(kind)[0]
        found.add(kind)
    return found


def _request(part: ModelRequestPart) -> ModelRequest:
    return ModelRequest(parts=[part], timestamp=WHEN, instructions="be brief", run_id="r1")


def _response(part: ModelResponsePart) -> ModelResponse:
    usage = RequestUsage(input_tokens=3, output_tokens=5)
    return ModelResponse(
        parts=[part],
        usage=usage,
        model_name="m-1",
        timestamp=WHEN,
        provider_name="p",
        provider_response_id="resp-1",
        finish_reason="stop",
        run_id="r1",
    )


def _retry_prompt() -> RetryPromptPart:
    return RetryPromptPart("not valid", tool_name="lookup", tool_call_id="c2", timestamp=WHEN)


def _samples() -> dict[type, ModelMessage]:
    """One message per part type, with the values Pydantic AI gives them."""
    found = {"discovered_tools": [{"name": "lookup"}]}
    return {
        SystemPromptPart: _request(SystemPromptPart("be kind", timestamp=WHEN)),
        UserPromptPart: _request(
            UserPromptPart(["look 🦜 e\u0301", PNG, ImageUrl("https://example.com/a.png")])
        ),
        SpeechPart: _request(
            SpeechPart(
                speaker="user",
                transcript="hi",
                audio=BinaryContent(data=b"RIFF\x00", media_type="audio/wav"),
            )
        ),
        ToolSearchReturnPart: _request(ToolSearchReturnPart(content=found, tool_call_id="s1")),  # type: ignore[arg-type]
        LoadCapabilityReturnPart: _request(
            LoadCapabilityReturnPart(content={"message": "loaded"}, tool_call_id="l1")
        ),
        ToolReturnPart: _request(
            ToolReturnPart("lookup", {"z": 1, "a": [1, 2]}, tool_call_id="c1")
        ),
        RetryPromptPart: _request(_retry_prompt()),
        RetryFeedbackPart: _request(
            RetryFeedbackPart(content="try again", retry=RetryInfo(cause="model_retry"))
        ),
        ToolAvailabilityDeltaPart: _request(ToolAvailabilityDeltaPart(tools_added=["lookup"])),
        CapabilityLoadDeltaPart: _request(CapabilityLoadDeltaPart(loaded=["memory"])),
        ModelSettingsDeltaPart: _request(ModelSettingsDeltaPart(settings={"thinking": "high"})),
        InstructionDeltaPart: _request(
            InstructionDeltaPart(
                id=InstructionId(AgentInstructionSource(), name="style"), content="be terse"
            )
        ),
        InstructionBaselinePart: _request(
            InstructionBaselinePart(instructions=[InstructionPart("do it")])
        ),
        CompactionPart: _request(CompactionPart(content="the story so far")),
        TextPart: _response(TextPart("hello 𝄞")),
        ToolSearchCallPart: _response(
            ToolSearchCallPart(args={"queries": ["weather"]}, tool_call_id="s1")
        ),
        LoadCapabilityCallPart: _response(
            LoadCapabilityCallPart(args={"id": "memory"}, tool_call_id="l1")
        ),
        ToolCallPart: _response(ToolCallPart("lookup", '{"z":1,"a":[1, 2],"z":3}', "c1")),
        NativeToolSearchCallPart: _response(
            NativeToolSearchCallPart(args={"queries": ["weather"]}, tool_call_id="n1")
        ),
        NativeToolCallPart: _response(NativeToolCallPart("web_search", {"q": "x"}, "n2")),
        NativeToolSearchReturnPart: _response(
            NativeToolSearchReturnPart(content=found, tool_call_id="n1")  # type: ignore[arg-type]
        ),
        NativeToolReturnPart: _response(NativeToolReturnPart("web_search", {"hits": [1]}, "n2")),
        ThinkingPart: _response(ThinkingPart("hmm", signature="sig==", provider_name="p")),
        FilePart: _response(FilePart(content=PNG)),
    }


def test_every_part_type_of_the_installed_pydantic_ai_has_a_sample() -> None:
    types = _part_types(ModelRequestPart) | _part_types(ModelResponsePart)
    assert len(types) == 24  # 20 part kinds; a kind's typed subclasses (tool search...) apart
    assert types - set(_samples()) == set()
    assert {type(m.parts[0]) for m in _samples().values()} == types


async def _round_trip(store: ConversationStore, messages: list[ModelMessage]) -> list[ModelMessage]:
    await store.save(Conversation(messages=messages, conversation_id="parts"))
    loaded = await store.load("parts")
    assert loaded is not None
    return loaded.messages


def _json(message: ModelMessage) -> bytes:
    return ModelMessagesTypeAdapter.dump_json([message])


async def test_every_part_type_comes_back_identical_but_the_deprecated_retry_prompt(
    store: Store,
) -> None:
    samples = _samples()
    messages = [*samples.values(), _response(CompactionPart(content="s", provider_name="p"))]
    messages.append(_response(SpeechPart(speaker="assistant", transcript="yo")))
    theirs = await _round_trip(InMemoryConversationStore(), messages)
    ours = await _round_trip(SteerableConversationStore(store), messages)
    assert theirs == messages  # a deep copy
    differ = [
        type(m.parts[0]).__name__
        for m, back in zip(messages, ours, strict=True)
        if back != m or _json(back) != _json(m)
    ]
    assert differ == ["RetryPromptPart"]
    # what it is: what Pydantic AI's own loader makes of it, a retried tool return
    retry = samples[RetryPromptPart]
    (back,) = [b for m, b in zip(messages, ours, strict=True) if m is retry]
    assert back == ModelMessagesTypeAdapter.validate_json(_json(retry))[0]
    (part,) = back.parts
    assert isinstance(part, ToolReturnPart) and part.outcome == "retried"
    assert (part.tool_name, part.tool_call_id, part.content) == ("lookup", "c2", "not valid")


async def test_an_image_given_as_binary_content_comes_back_narrowed_to_binary_image(
    store: Store,
) -> None:
    """Not a part type but its content: Pydantic AI's loader narrows an image's BinaryContent
    to its subclass BinaryImage; the data, media type and JSON are the same."""
    given = BinaryContent(data=PNG.data, media_type="image/png")
    message = _request(UserPromptPart(["look", given]))
    (back,) = await _round_trip(SteerableConversationStore(store), [message])
    part = back.parts[0]
    assert isinstance(part, UserPromptPart) and isinstance(part.content, list)
    narrowed = part.content[1]
    assert type(narrowed) is BinaryImage and narrowed.data == given.data
    assert _json(back) == _json(message)
