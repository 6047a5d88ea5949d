"""OpenAI's Chat Completions API, and every server that speaks it.

Our messages become Chat Completions messages: the instructions a ``system`` message, an
assistant message its ``content`` and ``tool_calls`` (each call's ``arguments`` exactly the
text the model sent), a user message holding tool results one ``tool`` message per result in
call order, followed by a ``user`` message for any text it holds. A steered message is an
ordinary ``user`` message where it was taken: after the tool results of the step.

The reply is streamed (unless ``stream=False``): ``content`` deltas go out as text deltas,
tool-call pieces are joined byte for byte per call index. An assistant message with tool
calls and no text is sent with ``"content": ""``, never ``null``, which schema-checking
servers refuse. Servers that stream ``reasoning_content`` (DeepSeek, vLLM,
Kimi...) get it kept as a :class:`~steerable.Reasoning` part of provider ``"openai-chat"``
and sent back on that assistant message, as those servers expect; OpenAI itself sends none,
so it is never sent any.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import openai
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from steerable.errors import ProviderError
from steerable.messages import Message, Part, Reasoning, Text, ToolCall, new_id
from steerable.models._provider import ClientModel
from steerable.models.base import (
    FinishReason,
    ModelEvent,
    ModelRequest,
    Reply,
    TextDelta,
    Usage,
)
from steerable.models.openai._common import (
    chat_tools,
    cut_short,
    empty_stream,
    make_client,
    provider_error,
    stream_error,
)
from steerable.models.openai._probe import ignored_tools_notice, ignores_tools

PROVIDER = "openai-chat"


ToolChoice = Literal["auto", "required", "none"]
"""Chat Completions' ``tool_choice``: let the model choose, make it call a tool, or not."""


class OpenAIChatModel(ClientModel):
    """A model behind the Chat Completions API, OpenAI's or a compatible server's.

    ``model`` is the provider's model name. Pass ``client`` to use an ``AsyncOpenAI`` you
    configured, or ``base_url``/``api_key`` (else ``OPENAI_BASE_URL``/``OPENAI_API_KEY``).
    ``max_retries`` is the SDK's: rate limits, 5xx and dropped connections are retried with
    backoff that honours ``Retry-After``. ``max_tokens_param`` is the body key that carries
    ``ModelSettings.max_tokens``: OpenAI wants ``max_completion_tokens``, some older
    compatible servers only know ``max_tokens``.

    With tools, ``tool_choice`` is always sent: ``"auto"`` unless set (OpenAI's own
    default, so saying it changes nothing there; llama-cpp-python's server drops the tools
    without a word unless it is said). ``"required"`` forces the turn's first call only:
    once a result came back, the turn's requests say ``"auto"`` (forced every time, the
    model could never answer). ``stream=False`` asks for the whole reply at once,
    for servers that cannot stream tool calls: the reply's text then reaches the run's
    events in one piece. A streamed request with tools that comes back empty (what such a
    server answers) is asked again once unstreamed, and every later request with tools of
    this model goes unstreamed: :meth:`take_notices` says so once, for the user to see.
    An empty stream without tools is asked again once unstreamed too (not remembered): a
    server that failed after its 200 says there what went wrong (a context overflow).
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
        max_tokens_param: Literal["max_completion_tokens", "max_tokens"] = "max_completion_tokens",
        tool_choice: ToolChoice | None = None,
        stream: bool = True,
    ) -> None:
        self.model = model
        self.client = make_client(
            client=client,
            base_url=base_url,
            api_key=api_key,
            max_retries=max_retries,
            timeout=timeout,
        )
        self.max_tokens_param = max_tokens_param
        self.tool_choice = tool_choice
        self.streaming = stream
        self._tools_unstreamed = False  # learned: this server cannot stream with tools
        self._probed = False  # asked the server whether it takes tools (see _probe)
        self._notices: list[str] = []

    def take_notices(self) -> list[str]:
        """What this model learned about its server since last asked, a sentence each.

        The chat shows them; an application may log them. Each is said once.
        """
        notices, self._notices = self._notices, []
        return notices

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body this model sends for ``request`` (``stream`` included)."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": chat_messages(request.instructions, request.messages),
        }
        if request.tools:
            body["tools"] = chat_tools(request.tools)
            choice = self.tool_choice or "auto"
            if choice == "required" and _called_this_turn(request.messages):
                choice = "auto"  # forced at the turn's start; after results it may answer
            body["tool_choice"] = choice
        settings = request.settings
        if settings.temperature is not None:
            body["temperature"] = settings.temperature
        if settings.max_tokens is not None:
            body[self.max_tokens_param] = settings.max_tokens
        streaming = self.streaming and not (request.tools and self._tools_unstreamed)
        body["stream"] = streaming
        if streaming:
            body["stream_options"] = {"include_usage": True}
        body.update(settings.extra)
        return body

    async def _attempt(self, body: dict[str, Any]) -> AsyncGenerator[ModelEvent, None]:
        if "tools" in body and not self._probed:
            self._probed = True
            if await ignores_tools(self.client):
                self._notices.append(ignored_tools_notice(self.model))
        if body["stream"] and "tools" in body and self._tools_unstreamed:
            body = _unstreamed(body)  # learned on an earlier attempt or request
        if not body["stream"]:
            for event in _events(await self._whole(body)):
                yield event
            return
        stream = await self._create(body, stream=True)
        builder = _ReplyBuilder()
        async with stream:
            try:
                async for chunk in stream:
                    for text in builder.add(chunk):
                        yield TextDelta(text)
            except openai.OpenAIError as exc:
                raise stream_error(PROVIDER, exc) from exc
        if not builder.began:
            # No reply at all, asked again unstreamed. With tools: a server that cannot
            # stream them (llama-cpp-python's), from now on asked for whole replies (said
            # before the whole reply, which may take minutes). Without: a server whose error
            # came after its 200 (llama-cpp-python streams a context overflow so) says
            # there what it was; its error, or its reply, is the answer.
            if "tools" in body:
                self._learn_unstreamed("the server sent an empty stream for a request with tools")
            whole = await self._whole(_unstreamed(body))
            if "tools" not in body and not _said(whole):
                raise empty_stream(PROVIDER)
            for event in _events(whole):
                yield event
            return
        if builder.finish_reason is None:
            raise cut_short(PROVIDER)
        reply = builder.build()
        if "tools" in body and not _said(reply):
            # Nothing said and nothing called: llama-cpp-python's chatml-function-calling
            # streams a text answer so. Asked unstreamed, a reply with something in it shows
            # the server cannot stream with tools: remembered, as an empty stream is. Empty
            # too, the whole reply is the answer still (with the usage a stream may lack).
            reply = await self._whole(_unstreamed(body))
            if _said(reply):
                self._learn_unstreamed(
                    "the server streamed an empty answer to a request with tools and had one"
                    " when asked for the whole reply"
                )
            for event in _events(reply):
                yield event
            return
        yield reply

    def _learn_unstreamed(self, why: str) -> None:
        """This server cannot stream with tools: whole replies for them from now on, said once."""
        self._tools_unstreamed = True
        self._notices.append(
            f"{self.model}: {why}; asking for whole replies when tools are given from now on"
            " (--no-stream says it from the start)"
        )

    async def _whole(self, body: dict[str, Any]) -> Reply:
        """The reply asked for unstreamed (:func:`_events` gives it to the run)."""
        return whole_reply(await self._create(body, stream=False))

    async def _create(self, body: dict[str, Any], *, stream: bool) -> Any:
        """Send the request; a refusal becomes a :class:`ProviderError` naming the server."""
        try:
            return await self.client.chat.completions.create(
                model=self.model,
                messages=cast(Any, body["messages"]),
                stream=stream,
                extra_body=_rest(body),
            )
        except openai.OpenAIError as exc:
            error = provider_error(PROVIDER, exc)
            if body.get("tool_choice") == "required" and (error.status or 0) >= 500:
                # llama-cpp-python's server fails an assertion on it: a bare 500
                error = ProviderError(
                    PROVIDER,
                    f"{error.message}; some servers cannot force a tool call:"
                    ' try tool_choice "auto" (the chat\'s --tool-choice auto)',
                    status=error.status,
                    retryable=error.retryable,
                )
            raise error from exc


def _called_this_turn(messages: Sequence[Message]) -> bool:
    """Whether a tool result came back since the turn's prompt (the last user message that
    is neither a tool result nor a steer)."""
    for message in reversed(messages):
        if message.role != "user":
            continue
        if message.tool_results:
            return True
        if not message.steered:
            return False
    return False


def _said(reply: Reply) -> bool:
    """Whether ``reply`` holds anything: text or a tool call."""
    return bool(reply.message.text or reply.message.tool_calls)


def _events(reply: Reply) -> list[ModelEvent]:
    """An unstreamed reply as the run's events: its text as one delta, then the reply."""
    return [TextDelta(reply.message.text), reply] if reply.message.text else [reply]


def _unstreamed(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` asking for the whole reply at once."""
    return {**{k: v for k, v in body.items() if k != "stream_options"}, "stream": False}


def _rest(body: dict[str, Any]) -> dict[str, Any]:
    """What the body holds besides the arguments ``create`` takes by name (sent as is)."""
    return {k: v for k, v in body.items() if k not in ("model", "messages", "stream")}


# -- our messages to Chat Completions ----------------------------------------------------


def chat_messages(instructions: str | None, messages: Sequence[Message]) -> list[dict[str, Any]]:
    """``messages`` as Chat Completions messages, the instructions first."""
    out: list[dict[str, Any]] = []
    if instructions:
        out.append({"role": "system", "content": instructions})
    for message in messages:
        if message.role == "assistant":
            out.append(_assistant(message))
            continue
        for result in message.tool_results:
            out.append({"role": "tool", "tool_call_id": result.call_id, "content": result.content})
        if any(isinstance(p, Text) for p in message.parts):
            out.append({"role": "user", "content": message.text})
    return out


def _assistant(message: Message) -> dict[str, Any]:
    # Never null: OpenAI takes a null content beside tool calls, but servers that validate
    # messages with a schema (llama-cpp-python's) answer it with a 500.
    entry: dict[str, Any] = {"role": "assistant", "content": message.text}
    reasoning = [
        p.text for p in message.parts if isinstance(p, Reasoning) and p.provider == PROVIDER
    ]
    if reasoning:
        entry["reasoning_content"] = "".join(reasoning)
    calls = message.tool_calls
    if calls:
        entry["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in calls
        ]
    return entry


# -- the streamed reply to our message ---------------------------------------------------


@dataclass
class _Call:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class _ReplyBuilder:
    """Collects a streamed completion (choice 0) into one assistant message."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, _Call] = {}
        self.usage = Usage(requests=1)
        self.finish_reason: FinishReason | None = None
        self.began = False  # a chunk with a choice or usage came: the server did answer

    def add(self, chunk: ChatCompletionChunk) -> list[str]:
        """Take one chunk; return the text it adds, for the run's events."""
        self.began = self.began or bool(chunk.choices) or chunk.usage is not None
        if chunk.usage is not None:
            self.usage = Usage(chunk.usage.prompt_tokens, chunk.usage.completion_tokens, 1)
        shown: list[str] = []
        for choice in chunk.choices:
            if choice.index != 0:
                continue
            delta = choice.delta
            thought = (delta.model_extra or {}).get("reasoning_content")
            if isinstance(thought, str) and thought:
                self.reasoning.append(thought)
            for piece in (delta.content, delta.refusal):
                if piece:
                    self.text.append(piece)
                    shown.append(piece)
            for call in delta.tool_calls or ():
                self._add_call(call.index, call.id, call.function)
            if choice.finish_reason is not None:
                self.finish_reason = finish_reason(choice.finish_reason)
        return shown

    def _add_call(self, index: int | None, id: str | None, function: Any) -> None:
        key = index if index is not None else len(self.calls)
        call = self.calls.setdefault(key, _Call())
        if id and not call.id:
            call.id = id
        if function is None:
            return
        name = cast(str | None, function.name)
        if name and name != call.name:  # some servers repeat the whole name in every chunk
            call.name += name
        if function.arguments:
            call.arguments.append(cast(str, function.arguments))

    def build(self) -> Reply:
        parts: list[Part] = []
        if self.reasoning:
            parts.append(Reasoning("".join(self.reasoning), PROVIDER))
        if self.text:
            parts.append(Text("".join(self.text)))
        for _, call in sorted(self.calls.items()):
            parts.append(
                ToolCall(call.id or f"call_{new_id()}", call.name, "".join(call.arguments))
            )
        return Reply(Message("assistant", tuple(parts)), self.usage, self.finish_reason)


def finish_reason(reason: str | None) -> FinishReason | None:
    """Chat Completions' ``finish_reason`` in steerable's terms."""
    if reason is None:
        return None
    if reason in ("stop", "length", "tool_calls", "content_filter"):
        return cast(FinishReason, reason)
    return "tool_calls" if reason == "function_call" else "other"


def whole_reply(completion: ChatCompletion) -> Reply:
    """An unstreamed completion (choice 0) as a reply."""
    builder = _ReplyBuilder()
    usage = completion.usage
    if usage is not None:
        builder.usage = Usage(usage.prompt_tokens, usage.completion_tokens, 1)
    if not completion.choices:
        raise ProviderError(PROVIDER, "the server answered with no choices, no reply at all")
    choice = completion.choices[0]
    message = choice.message
    thought = (message.model_extra or {}).get("reasoning_content")
    if isinstance(thought, str) and thought:
        builder.reasoning.append(thought)
    builder.text.extend(t for t in (message.content, message.refusal) if t)
    for index, call in enumerate(message.tool_calls or ()):
        function = getattr(call, "function", None)
        builder._add_call(index, call.id, function)
    builder.finish_reason = finish_reason(choice.finish_reason)
    return builder.build()
