"""A conversation stored by one process and resumed by another reaches the provider in the
same shape as if it had never stopped: reasoning blocks, tool calls, results and steers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.models.resume_worker import STEER, run_turns
from tests.models.wire import (
    Answer,
    WireServer,
    anthropic_stream,
    call_item,
    chat_stream,
    message_item,
    reasoning_item,
    responses_stream,
    text_block,
    thinking_block,
    tool_use_block,
)

ROOT = Path(__file__).resolve().parents[2]
ARGUMENTS = ['{"q":', ' "conf', 'ig" }']


def script(provider: str) -> tuple[list[Answer], str]:
    """Turn 1 (a reasoned tool call, then an answer) and turn 2; and the verbatim marker."""
    if provider == "chat":
        first = chat_stream(["Looking."], [("call_1", "search", ARGUMENTS)], reasoning=["hm"])
        return [first, chat_stream(["It is config.toml."]), chat_stream(["Summary."])], '"hm"'
    if provider == "responses":
        first = responses_stream(
            reasoning_item("rs_1", "think", "ENCRYPTED-1"),
            call_item("fc_1", "call_1", "search", ARGUMENTS),
        )
        answer = responses_stream(message_item("msg_2", ["It is config.toml."]))
        return [first, answer, responses_stream(message_item("msg_3", ["Summary."]))], "ENCRYPTED-1"
    first = anthropic_stream(
        thinking_block(["hm"], "SIGNATURE-1"), tool_use_block("toolu_1", "search", *ARGUMENTS)
    )
    answer = anthropic_stream(text_block("It is config.toml."))
    return [first, answer, anthropic_stream(text_block("Summary."))], "SIGNATURE-1"


def worker(provider: str, url: str, database: Path, *turns: int) -> None:
    command = [sys.executable, "-m", "tests.models.resume_worker", provider, url, str(database)]
    subprocess.run([*command, *map(str, turns)], cwd=ROOT, check=True, timeout=60)


@pytest.mark.parametrize("provider", ["chat", "responses", "anthropic"])
async def test_a_resumed_conversation_is_sent_as_if_it_never_stopped(
    provider: str, tmp_path: Path
) -> None:
    answers, marker = script(provider)
    with WireServer(*answers) as straight:
        await run_turns(provider, straight.url, tmp_path / "one.db", [1, 2])
    answers, _ = script(provider)
    with WireServer(*answers) as split:
        worker(provider, split.url, tmp_path / "two.db", 1)
        worker(provider, split.url, tmp_path / "two.db", 2)

    assert len(straight.requests) == len(split.requests) == 3
    assert split.bodies == straight.bodies
    resumed = split.requests[2].body.decode()
    assert marker in resumed  # the reasoning went back, verbatim
    assert resumed.index("found config") < resumed.index(STEER) < resumed.index("now summarise")
