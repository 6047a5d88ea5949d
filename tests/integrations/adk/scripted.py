"""A scripted ADK model for the tests: it records each request and answers from a script.

Each reply is a function call (``call(name, id, **args)``) or a final text (``say(text)``);
the model records every request's contents (as plain dicts), in memory and, when given a
``requests`` file, as one JSON line each (for tests whose model runs in another process).
Asked to stream (ADK's SSE mode), it sends each reply's text a word at a time, through ADK's
own aggregator as Gemini's model does: partial responses, then the whole reply.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncGenerator, Awaitable, Callable
from pathlib import Path
from typing import Any

from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.utils.streaming_utils import StreamingResponseAggregator
from google.genai import types
from pydantic import Field


def call(name: str, id: str, **args: Any) -> LlmResponse:
    """A reply that calls the tool ``name`` (call id ``id``) with ``args``."""
    function_call = types.FunctionCall(name=name, args=args, id=id)
    return LlmResponse(
        content=types.Content(role="model", parts=[types.Part(function_call=function_call)])
    )


def say(text: str) -> LlmResponse:
    """A final text reply."""
    return LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]))


class ScriptedLlm(BaseLlm):
    """Answers each request with the next reply of ``script`` and records the request.

    Past the script's end it answers ``"(end of script)"``. ``hook``, when set, is awaited
    with the request's index before each reply (a test holds a reply there). Unless
    ``streams`` is False, a request to stream gets each reply in pieces.
    """

    script: list[LlmResponse] = Field(default_factory=list)
    requests: list[list[dict[str, Any]]] = Field(default_factory=list)
    record_to: str | None = None
    replica: str = ""
    hook: Callable[[int], Awaitable[None]] | None = None
    streams: bool = True

    def record(self, contents: list[dict[str, Any]]) -> None:
        """Keep a request's contents, and append them to ``record_to`` when it is set."""
        self.requests.append(contents)
        if self.record_to is not None:
            _append(self.record_to, json.dumps({"replica": self.replica, "contents": contents}))

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        """Record ``llm_request`` and yield the next scripted reply."""
        contents = [c.model_dump(mode="json", exclude_none=True) for c in llm_request.contents]
        self.record(contents)
        if self.hook is not None:
            await self.hook(len(self.requests) - 1)
        reply = self.script.pop(0) if self.script else say("(end of script)")
        if not (stream and self.streams):
            yield reply.model_copy(deep=True)
            return
        aggregator = StreamingResponseAggregator()
        for chunk in _chunks(reply):
            async for response in aggregator.process_response(chunk):
                yield response
        whole = aggregator.close()
        if whole is not None:
            yield whole


def _chunks(reply: LlmResponse) -> list[types.GenerateContentResponse]:
    """``reply`` as a provider streams it: a chunk per word of text, one per other part."""
    parts: list[types.Part] = []
    for part in reply.content.parts or [] if reply.content else []:
        if part.text:
            parts += [types.Part(text=w) for w in re.findall(r"\S+\s*|\s+", part.text)]
        else:
            parts.append(part)
    return [
        types.GenerateContentResponse(
            candidates=[
                types.Candidate(
                    content=types.Content(role="model", parts=[part]),
                    finish_reason=types.FinishReason.STOP if last else None,
                )
            ]
        )
        for last, part in ((i == len(parts) - 1, p) for i, p in enumerate(parts))
    ]


def _append(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as file:  # one write per line: atomic append
        file.write(line + "\n")


def recorded(path: Path) -> list[tuple[str, list[dict[str, Any]]]]:
    """The requests models recorded to ``path``: each one's replica and contents."""
    if not path.exists():
        return []
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return [(line["replica"], line["contents"]) for line in lines]


def texts_of(contents: list[dict[str, Any]]) -> list[str]:
    """Each content of a request as one short word: its text, or call:ID / result:ID."""
    words: list[str] = []
    for content in contents:
        for part in content.get("parts", []):
            if "text" in part:
                words.append(part["text"])
            elif "function_call" in part:
                words.append("call:" + part["function_call"]["id"])
            elif "function_response" in part:
                words.append("result:" + part["function_response"]["id"])
    return words


def problems(contents: list[dict[str, Any]]) -> list[str]:
    """What a provider would refuse: a function call whose response is not next."""
    found: list[str] = []
    waiting: set[str] = set()
    for index, content in enumerate(contents):
        parts = content.get("parts", [])
        answered = {p["function_response"]["id"] for p in parts if "function_response" in p}
        if waiting and waiting != answered:
            found.append(f"content {index}: calls {sorted(waiting)} answered by {sorted(answered)}")
        elif answered and not waiting:
            found.append(f"content {index}: results {sorted(answered)} answer no call")
        waiting = {p["function_call"]["id"] for p in parts if "function_call" in p}
    if waiting:
        found.append(f"the request ends with calls {sorted(waiting)} open")
    return found
