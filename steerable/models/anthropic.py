"""Anthropic's Messages API through the official SDK; needs ``steerable[anthropic]``.

Our messages become Messages API turns: the instructions the ``system`` prompt; a user
message's tool results ``tool_result`` blocks (in call order, ``is_error`` when the tool
failed) and its text a ``text`` block; an assistant message its thinking blocks, text and
``tool_use`` blocks in the order the model produced them. Consecutive messages of one role
are merged into one turn, which is how a steered message taken at a step travels: in the
user turn that holds the step's tool results, after them, as the API requires.

The reply is streamed. Text deltas go out as they come; a tool call's ``input_json_delta``
pieces are joined byte for byte into its arguments (a call streamed with no pieces keeps
the ``input`` its start block gave, as compact JSON). Thinking and redacted-thinking blocks,
and any block we do not map (a server tool's), are kept in :class:`~steerable.Reasoning`
parts of provider ``"anthropic"`` whose ``data`` is the block as the API would return it
unstreamed, signature included; they go back unchanged, to Anthropic only.

Sending a tool call back, the API wants ``input`` as an object: the raw arguments are
parsed for it. Arguments that are not a JSON object (a reply cut off by ``max_tokens``)
are sent as ``{}``; the tool's error result, which quotes them, tells the model what went
wrong. A transcript ending with an assistant message is sent as it is: models that refuse
assistant prefill answer 400, and the run fails with their message.
"""

from __future__ import annotations

from steerable._extras import missing_extra

try:
    import anthropic
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise missing_extra("steerable.models.anthropic", "anthropic", "anthropic", exc) from None

import contextlib
import json
import os
from collections.abc import AsyncGenerator, Sequence
from typing import Any, cast

from steerable.errors import ProviderError, UsageError
from steerable.messages import Message, Native, Part, Reasoning, Text, ToolCall, ToolResult
from steerable.models._provider import (
    ClientModel,
    StreamBroken,
    compact_json,
    error_message,
    one_line,
    retryable_status,
)
from steerable.models.base import (
    FinishReason,
    ModelEvent,
    ModelRequest,
    Reply,
    TextDelta,
    ToolSpec,
    Usage,
)

__all__ = ["PROVIDER", "AnthropicModel"]

PROVIDER = "anthropic"

# Mid-stream error events a later try may get past.
_TRANSIENT = ("overloaded_error", "api_error", "rate_limit_error", "timeout_error")


class AnthropicModel(ClientModel):
    """A Claude model behind the Messages API.

    ``model`` is the model's name (``"claude-sonnet-4-5"``). Pass ``client`` to use an
    ``AsyncAnthropic`` you configured, or ``base_url``/``api_key`` (else
    ``ANTHROPIC_BASE_URL``/``ANTHROPIC_API_KEY``). ``max_tokens`` is sent when the request's
    settings set none (the API requires it). ``max_retries`` is the SDK's: rate limits, 5xx,
    529 and dropped connections are retried, sleeping as ``Retry-After`` says.
    """

    provider = PROVIDER

    def __init__(
        self,
        model: str,
        *,
        client: anthropic.AsyncAnthropic | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        max_tokens: int = 8192,
        max_retries: int = 2,
        timeout: float | None = None,
    ) -> None:
        self.model = model
        self.max_tokens = max_tokens
        self.client = _client(client, base_url, api_key, max_retries, timeout)

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body this model sends for ``request`` (``stream`` included)."""
        settings = request.settings
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": settings.max_tokens
            if settings.max_tokens is not None
            else self.max_tokens,
        }
        if request.instructions:
            body["system"] = request.instructions
        body["messages"] = anthropic_messages(request.messages)
        if request.tools:
            body["tools"] = _tools(request.tools)
        if settings.temperature is not None:
            body["temperature"] = settings.temperature
        body["stream"] = True
        body.update(settings.extra)
        return body

    async def _attempt(self, body: dict[str, Any]) -> AsyncGenerator[ModelEvent, None]:
        rest = {k: v for k, v in body.items() if k not in ("model", "max_tokens", "messages")}
        rest.pop("stream")
        try:
            stream = await self.client.messages.create(
                model=self.model,
                max_tokens=body["max_tokens"],
                messages=cast(Any, body["messages"]),
                stream=True,
                extra_body=rest,
            )
        except anthropic.AnthropicError as exc:
            raise _error(exc) from exc
        reply = _ReplyBuilder()
        async with stream:
            try:
                async for event in stream:
                    text = reply.add(event)
                    if text:
                        yield TextDelta(text)
                    if reply.finished:
                        break
            except anthropic.AnthropicError as exc:
                error = _error(exc)
                if isinstance(exc, anthropic.APIConnectionError) or error.retryable:
                    raise StreamBroken(error) from exc
                raise error from exc
        if not reply.finished:
            raise StreamBroken(
                ProviderError(
                    PROVIDER, "the stream ended before the reply was complete", retryable=True
                )
            )
        yield reply.build()


def _client(
    client: anthropic.AsyncAnthropic | None,
    base_url: str | None,
    api_key: str | None,
    max_retries: int,
    timeout: float | None,
) -> anthropic.AsyncAnthropic:
    if client is not None:
        if base_url is not None or api_key is not None:
            raise UsageError("pass either client= or base_url=/api_key=, not both")
        return client
    api_key = api_key or os.environ.get("ANTHROPIC_API_KEY") or None
    if api_key is None and not os.environ.get("ANTHROPIC_AUTH_TOKEN"):
        raise UsageError("no Anthropic API key: set ANTHROPIC_API_KEY (or pass api_key=)")
    base_url = base_url or os.environ.get("ANTHROPIC_BASE_URL") or None
    if timeout is None:
        return anthropic.AsyncAnthropic(api_key=api_key, base_url=base_url, max_retries=max_retries)
    return anthropic.AsyncAnthropic(
        api_key=api_key, base_url=base_url, max_retries=max_retries, timeout=timeout
    )


def _error(exc: anthropic.AnthropicError) -> ProviderError:
    if isinstance(exc, anthropic.APIStatusError):
        status = exc.status_code
        kind = _error_type(exc.body)
        message = error_message(exc.body, exc.message)
        if status < 400:  # an error event inside a 200 stream
            return ProviderError(PROVIDER, message, retryable=kind in _TRANSIENT)
        return ProviderError(PROVIDER, message, status=status, retryable=retryable_status(status))
    if isinstance(exc, anthropic.APIConnectionError):
        cause = exc.__cause__ or exc.__context__
        detail = f" ({type(cause).__name__}: {cause})" if cause is not None else ""
        where = f"{exc.request.method} {exc.request.url}"
        message = one_line(f"{exc.message} {where}{detail}")
        return ProviderError(PROVIDER, f"{message}; is the server running?", retryable=True)
    return ProviderError(PROVIDER, str(exc))


def _error_type(body: object) -> str:
    if isinstance(body, dict):
        inner = body.get("error")
        if isinstance(inner, dict) and isinstance(inner.get("type"), str):
            return cast(str, inner["type"])
    return ""


def _tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {"name": t.name, "description": t.description, "input_schema": dict(t.parameters)}
        for t in tools
    ]


# -- our messages to Messages API turns --------------------------------------------------


def anthropic_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """``messages`` as Messages API turns, consecutive messages of one role merged."""
    turns: list[dict[str, Any]] = []
    for message in messages:
        blocks = [b for p in message.parts if (b := _block(p)) is not None]
        if not blocks:
            continue  # the API refuses an empty turn; nothing of it was meant for Anthropic
        if turns and turns[-1]["role"] == message.role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": message.role, "content": blocks})
    return turns


def _block(part: Part) -> dict[str, Any] | None:
    if isinstance(part, Text):
        return {"type": "text", "text": part.text} if part.text else None
    if isinstance(part, ToolCall):
        return {"type": "tool_use", "id": part.id, "name": part.name, "input": _input(part)}
    if isinstance(part, ToolResult):
        block: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": part.call_id,
            "content": part.content,
        }
        if part.is_error:
            block["is_error"] = True
        return block
    if isinstance(part, Native):
        return None  # a framework's own record: not ours to send
    if part.provider == PROVIDER and part.data:
        return cast(dict[str, Any], json.loads(part.data))
    return None  # another provider's reasoning means nothing to Anthropic


def _input(call: ToolCall) -> dict[str, Any]:
    try:
        value = json.loads(call.arguments or "{}")
    except ValueError:
        return {}
    return cast(dict[str, Any], value) if isinstance(value, dict) else {}


# -- the streamed reply to our message ---------------------------------------------------


class _Block:
    """One content block as it streams in."""

    def __init__(self, start: dict[str, Any]) -> None:
        self.start = start
        self.pieces: list[str] = []  # text, thinking or partial JSON, by the block's type
        self.signature: list[str] = []

    def part(self) -> Part | None:
        kind = self.start.get("type")
        joined = "".join(self.pieces)
        if kind == "text":
            text = str(self.start.get("text", "")) + joined
            return Text(text) if text else None
        if kind == "tool_use":
            arguments = joined if self.pieces else compact_json(self.start.get("input", {}))
            return ToolCall(
                str(self.start.get("id", "")), str(self.start.get("name", "")), arguments
            )
        block = dict(self.start)
        if kind == "thinking":
            block["thinking"] = str(block.get("thinking", "")) + joined
            block["signature"] = str(block.get("signature", "")) + "".join(self.signature)
            return Reasoning(block["thinking"], PROVIDER, compact_json(block))
        if self.pieces and "input" in block:  # a server tool's streamed input
            with contextlib.suppress(ValueError):
                block["input"] = json.loads(joined)
        return Reasoning("", PROVIDER, compact_json(block))


class _ReplyBuilder:
    """Collects a streamed message into one assistant message."""

    def __init__(self) -> None:
        self.blocks: dict[int, _Block] = {}
        self.input_tokens = 0
        self.output_tokens = 0
        self.finished = False
        self.stop_reason: str | None = None

    def add(self, event: Any) -> str:
        """Take one event; return the text it adds, for the run's events."""
        # Read by the wire format's field names: the SDK's event classes vary by version.
        kind = event.type
        if kind == "content_block_delta":
            return self._delta(self.blocks[event.index], event.delta)
        if kind == "content_block_start":
            self.blocks[event.index] = _Block(event.content_block.to_dict(mode="json"))
        elif kind == "message_start":
            self._usage(event.message.usage)
        elif kind == "message_delta":
            self._usage(event.usage)
            reason = getattr(event.delta, "stop_reason", None)
            if reason:
                self.stop_reason = str(reason)
        elif kind == "message_stop":
            self.finished = True
        return ""

    def _delta(self, block: _Block, delta: Any) -> str:
        kind = delta.type
        if kind == "text_delta":
            block.pieces.append(delta.text)
            return cast(str, delta.text)
        if kind == "input_json_delta":
            block.pieces.append(delta.partial_json)
        elif kind == "thinking_delta":
            block.pieces.append(delta.thinking)
        elif kind == "signature_delta":
            block.signature.append(delta.signature)
        return ""

    def _usage(self, usage: Any) -> None:
        if usage is None:
            return
        counted = [
            getattr(usage, name, None)
            for name in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        ]
        if any(isinstance(n, int) for n in counted):
            self.input_tokens = max(
                self.input_tokens, sum(n for n in counted if isinstance(n, int))
            )
        output = getattr(usage, "output_tokens", None)
        if isinstance(output, int):
            self.output_tokens = output  # cumulative: the last count is the whole

    def build(self) -> Reply:
        parts = [p for _, b in sorted(self.blocks.items()) if (p := b.part()) is not None]
        usage = Usage(self.input_tokens, self.output_tokens, 1)
        reason = _STOP_REASONS.get(self.stop_reason, "other") if self.stop_reason else None
        return Reply(Message("assistant", tuple(parts)), usage, reason)


_STOP_REASONS: dict[str | None, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
}
