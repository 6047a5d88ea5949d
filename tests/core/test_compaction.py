"""Compaction: the summary stored as a message, the originals kept, the model sent the rest.

A ScriptedModel records every request, so what the model is sent after a compaction is
asserted as it went out; a model that refuses long requests as a server whose context is
full does (its words are llama.cpp's and OpenAI's) shows the summary taken from the
latest part of the conversation.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from steerable import Runner, ScriptedModel, Spec, open_session
from steerable.compaction import (
    COMPACTION,
    compact,
    compaction_of,
    is_context_overflow,
    model_view,
)
from steerable.errors import ProviderError, UsageError
from steerable.messages import Message, Native, Text, user
from steerable.models.base import ModelRequest
from steerable.models.scripted import call
from steerable.store import Store
from steerable.stores.memory import MemoryStore
from steerable.stores.sqlite import SQLiteStore
from steerable.tools import tool

OVERFLOW = "requested tokens (2400) exceed context window of 2048"


@tool
async def look(q: str) -> str:
    """Look something up."""
    return f"seen {q}"


def test_the_model_view_starts_at_the_last_compaction() -> None:
    plain = [user("a"), Message("assistant", (Text("b"),))]
    assert model_view(plain) == plain
    first = Message("user", (Text("s1"), _marker()))
    last = Message("user", (Text("s2"), _marker()))
    look_alike = Message("user", (Text("a summary, but no marker"),))
    messages = [*plain, first, user("c"), last, look_alike, user("d")]
    assert list(model_view(messages)) == messages[4:]


def _marker() -> Native:
    return Native(COMPACTION, '{"covers": 2}', "compaction")


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_a_compaction_is_stored_and_later_requests_start_from_it(
    backend: str, tmp_path: Path
) -> None:
    async with contextlib.AsyncExitStack() as stack:
        store: Store = MemoryStore()
        if backend == "sqlite":
            store = await stack.enter_async_context(SQLiteStore(tmp_path / "c.db"))
        session = open_session("s", store)
        model = ScriptedModel(
            [
                call("look", '{"q": "rates"}'),
                "Rates are 4%.",
                "The user asked about rates; they are 4%.",  # the summary
                "Yes, 4% still.",
            ]
        )
        spec = Spec(tools=[look], session=session)
        await Runner.run(spec, "what are the rates?", model)
        before = await session.messages()
        summary = await compact(session, model)
        result = await Runner.run(spec, [*await session.messages(), user("still?")], model)
        stored = await session.messages()

    assert result.output == "Yes, 4% still."
    assert stored[: len(before)] == before  # every original message kept as it was
    assert stored[len(before)] == summary
    assert compaction_of(summary) == {"covers": len(before)}
    assert "The user asked about rates" in summary.text
    summarized, after = model.requests[2], model.requests[3]
    assert summarized.tools == ()  # the summary's request offers no tools
    assert "seen rates" in summarized.messages[0].text  # the conversation, as text
    assert [m.text for m in after.messages] == [summary.text, "still?"]


async def test_a_conversation_past_the_context_is_summarized_from_its_latest_part() -> None:
    def small_context(request: ModelRequest) -> str:
        if len(request.messages[0].text) > 3_000:
            raise ProviderError("openai-chat", OVERFLOW, status=400)
        return "the gist"

    session = open_session("s", MemoryStore())
    long = [user("x" * 2_000 + f" {i}") for i in range(5)]
    await session.save(long)
    model = ScriptedModel([small_context] * 4)
    message = await compact(session, model, max_chars=8_000)
    sent = [r.messages[0].text for r in model.requests]
    assert len(sent) == 3  # 8,000 then 4,000 refused, 2,000 taken
    assert "(the earlier part is left out)" in sent[-1]
    assert sent[-1].endswith(" 4")  # the latest part is the one kept
    assert message.text.endswith("the gist")


async def test_nothing_new_or_a_turn_halfway_is_refused_and_nothing_is_stored() -> None:
    session = open_session("s", MemoryStore())
    with pytest.raises(UsageError, match="nothing to compact"):
        await compact(session, ScriptedModel([]))
    await session.save([user("go"), Message("assistant", (call("look", '{"q": "a"}'),))])
    with pytest.raises(UsageError, match="halfway"):
        await compact(session, ScriptedModel([]))
    assert len(await session.messages()) == 2


async def test_a_server_error_that_is_not_an_overflow_stores_nothing() -> None:
    def refuse(request: ModelRequest) -> str:
        raise ProviderError("openai-chat", "invalid api key", status=401)

    session = open_session("s", MemoryStore())
    await session.save([user("hi")])
    with pytest.raises(ProviderError, match="invalid api key"):
        await compact(session, ScriptedModel([refuse]))
    assert len(await session.messages()) == 1


@pytest.mark.parametrize(
    ("message", "overflow"),
    [
        ("requested tokens (2400) exceed context window of 2048", True),
        ("This model's maximum context length is 2048 tokens.", True),
        ("the request exceeds the available context size, try increasing it", True),
        ("prompt is too long: 210000 tokens > 200000 maximum", True),
        ("invalid api key", False),
    ],
)
def test_a_context_overflow_is_recognised_in_the_servers_words(
    message: str, overflow: bool
) -> None:
    assert is_context_overflow(ProviderError("openai-chat", message, status=400)) is overflow
    assert not is_context_overflow(ValueError(message))
