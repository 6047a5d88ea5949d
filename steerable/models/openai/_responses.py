"""OpenAI's Responses API.

Our messages become input items: a user message's text an ``{"role": "user"}`` item, its
tool results ``function_call_output`` items in call order (before the text, which is how a
steered message taken at a step reads: after the results), an assistant message its text
and its ``function_call`` items (``arguments`` exactly the text the model sent).

A reply holding reasoning items (or any item we do not map, such as a built-in tool's) keeps
all its output items, verbatim, in one :class:`~steerable.Reasoning` part of provider
``"openai-responses"`` (``data`` is the JSON list of the items; ``text`` the reasoning
summaries). That message goes back as those very items, ids included: OpenAI pairs a
reasoning item with the item that followed it by id, and refuses one without the other.
The Text and ToolCall parts beside it say the same thing in steerable's terms.

Nothing is stored on OpenAI's side on our behalf: we send the whole transcript every time.
For zero-data-retention organizations pass ``extra={"store": False, "include":
["reasoning.encrypted_content"]}`` so reasoning items carry their encrypted content.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Sequence
from typing import Any, cast

import openai
from openai.types.responses import ResponseStreamEvent

from steerable.errors import ProviderError
from steerable.messages import Message, Part, Reasoning, Text, ToolCall
from steerable.models._provider import ClientModel, StreamBroken, compact_json
from steerable.models.base import (
    FinishReason,
    ModelEvent,
    ModelRequest,
    Reply,
    TextDelta,
    Usage,
)
from steerable.models.openai._common import (
    cut_short,
    make_client,
    provider_error,
    responses_tools,
    stream_error,
)

PROVIDER = "openai-responses"

_MAPPED = ("message", "function_call")


class OpenAIResponsesModel(ClientModel):
    """A model behind the Responses API (``/responses``).

    ``model`` is the provider's model name. Pass ``client`` to use an ``AsyncOpenAI`` you
    configured, or ``base_url``/``api_key`` (else ``OPENAI_BASE_URL``/``OPENAI_API_KEY``).
    ``max_retries`` is the SDK's: rate limits, 5xx and dropped connections are retried with
    backoff that honours ``Retry-After``.
    """

    provider = PROVIDER

    def __init__(
        self,
        model: str,
        *,
        client: openai.AsyncOpenAI | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        max_retries: int = 2,
        timeout: float | None = None,
    ) -> None:
        self.model = model
        self.client = make_client(
            client=client,
            base_url=base_url,
            api_key=api_key,
            max_retries=max_retries,
            timeout=timeout,
        )

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body this model sends for ``request`` (``stream`` included)."""
        body: dict[str, Any] = {"model": self.model}
        if request.instructions:
            body["instructions"] = request.instructions
        body["input"] = input_items(request.messages)
        if request.tools:
            body["tools"] = responses_tools(request.tools)
        settings = request.settings
        if settings.temperature is not None:
            body["temperature"] = settings.temperature
        if settings.max_tokens is not None:
            body["max_output_tokens"] = settings.max_tokens
        body["stream"] = True
        body.update(settings.extra)
        return body

    async def _attempt(self, body: dict[str, Any]) -> AsyncGenerator[ModelEvent, None]:
        rest = {k: v for k, v in body.items() if k not in ("model", "input", "stream")}
        try:
            stream = await self.client.responses.create(
                model=self.model, input=cast(Any, body["input"]), stream=True, extra_body=rest
            )
        except openai.OpenAIError as exc:
            raise provider_error(PROVIDER, exc) from exc
        reply = _ReplyBuilder()
        async with stream:
            try:
                async for event in stream:
                    text = reply.add(event)
                    if text:
                        yield TextDelta(text)
                    if reply.finished:
                        break
            except openai.OpenAIError as exc:
                raise stream_error(PROVIDER, exc) from exc
        if not reply.finished:
            raise cut_short(PROVIDER)
        yield reply.build()


# -- our messages to input items ---------------------------------------------------------


def input_items(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """``messages`` as Responses input items."""
    items: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "assistant":
            items.extend(_assistant(message))
            continue
        for result in message.tool_results:
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": result.call_id,
                    "output": result.content,
                }
            )
        if any(isinstance(p, Text) for p in message.parts):
            items.append({"role": "user", "content": message.text})
    return items


def _assistant(message: Message) -> list[dict[str, Any]]:
    for part in message.parts:
        if isinstance(part, Reasoning) and part.provider == PROVIDER and part.data:
            return _verbatim(message, part.data)
    items: list[dict[str, Any]] = []
    if message.text:
        items.append({"role": "assistant", "content": message.text})
    items.extend(_call(c) for c in message.tool_calls)
    return items


def _verbatim(message: Message, data: str) -> list[dict[str, Any]]:
    """The reply's own output items; a call the transcript no longer holds is left out."""
    calls = {c.id for c in message.tool_calls}
    raw = cast(list[dict[str, Any]], json.loads(data))
    items = [i for i in raw if i.get("type") != "function_call" or i.get("call_id") in calls]
    sent = {i.get("call_id") for i in items if i.get("type") == "function_call"}
    items.extend(_call(c) for c in message.tool_calls if c.id not in sent)
    return items


def _call(call: ToolCall) -> dict[str, Any]:
    return {
        "type": "function_call",
        "call_id": call.id,
        "name": call.name,
        "arguments": call.arguments,
    }


# -- the streamed reply to our message ---------------------------------------------------


class _ReplyBuilder:
    """Collects a streamed response into one assistant message."""

    def __init__(self) -> None:
        self.items: dict[int, dict[str, Any]] = {}
        self.arguments: dict[str, list[str]] = {}
        self.output: list[dict[str, Any]] | None = None
        self.usage = Usage(requests=1)
        self.finished = False
        self.incomplete: str | None = None  # why a response.incomplete stopped

    def add(self, event: ResponseStreamEvent) -> str:
        """Take one event; return the text it adds, for the run's events."""
        # Read by the wire format's field names: the SDK's event classes vary by version.
        e: Any = event
        kind = e.type
        if kind in ("response.output_text.delta", "response.refusal.delta"):
            return cast(str, e.delta or "")
        if kind == "response.function_call_arguments.delta":
            self.arguments.setdefault(str(e.item_id), []).append(cast(str, e.delta))
        elif kind == "response.output_item.done":
            index = getattr(e, "output_index", None)
            self.items[index if isinstance(index, int) else len(self.items)] = e.item.to_dict(
                mode="json"
            )
        elif kind in ("response.completed", "response.incomplete"):
            if kind == "response.incomplete":
                details = getattr(e.response, "incomplete_details", None)
                self.incomplete = str(getattr(details, "reason", None) or "")
            self._complete(e.response)
        elif kind == "response.failed":
            self._failed(e.response)
        elif kind == "error":
            raise ProviderError(PROVIDER, str(e.message or "the stream reported an error"))
        return ""

    def _complete(self, response: Any) -> None:
        output = [i.to_dict(mode="json") for i in response.output or ()]
        self.output = output or None
        if response.usage is not None:
            self.usage = Usage(response.usage.input_tokens, response.usage.output_tokens, 1)
        self.finished = True

    def _failed(self, response: Any) -> None:
        error = response.error
        message = error.message if error is not None else "the response failed"
        code = error.code if error is not None else None
        failure = ProviderError(PROVIDER, message, retryable=code == "server_error")
        if failure.retryable:
            raise StreamBroken(failure)
        raise failure

    def build(self) -> Reply:
        output = self.output or [self.items[i] for i in sorted(self.items)]
        parts: list[Part] = []
        summaries: list[str] = []
        keep = False
        for item in output:
            kind = item.get("type")
            if kind == "message":
                text = "".join(_texts(item))
                if text:
                    parts.append(Text(text))
            elif kind == "function_call":
                parts.append(self._tool_call(item))
            else:
                keep = True
                if kind == "reasoning":
                    summaries.extend(_summaries(item))
        if keep:
            parts.insert(0, Reasoning("\n\n".join(summaries), PROVIDER, compact_json(output)))
        message = Message("assistant", tuple(parts))
        return Reply(message, self.usage, self._finish_reason(message))

    def _finish_reason(self, message: Message) -> FinishReason:
        if self.incomplete is not None:
            reasons: dict[str, FinishReason] = {
                "max_output_tokens": "length",
                "content_filter": "content_filter",
            }
            return reasons.get(self.incomplete, "other")
        return "tool_calls" if message.tool_calls else "stop"

    def _tool_call(self, item: dict[str, Any]) -> ToolCall:
        arguments = item.get("arguments")
        if not isinstance(arguments, str):  # a server that only streamed them
            arguments = "".join(self.arguments.get(str(item.get("id", "")), []))
        return ToolCall(str(item.get("call_id", "")), str(item.get("name", "")), arguments)


def _texts(item: dict[str, Any]) -> list[str]:
    texts: list[str] = []
    for content in item.get("content") or ():
        if content.get("type") == "output_text":
            texts.append(str(content.get("text", "")))
        elif content.get("type") == "refusal":
            texts.append(str(content.get("refusal", "")))
    return texts


def _summaries(item: dict[str, Any]) -> list[str]:
    return [str(s.get("text", "")) for s in item.get("summary") or () if isinstance(s, dict)]
