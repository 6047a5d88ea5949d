"""The OpenAI client, its errors, and the tool schemas both OpenAI APIs share."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import openai

from steerable.errors import ProviderError, UsageError
from steerable.models._provider import StreamBroken, error_message, one_line, retryable_status
from steerable.models.base import ToolSpec

# Sent as the key to a compatible server when none is set: most local servers want none,
# and the SDK refuses to run without one.
NO_KEY = "no-key"


def make_client(
    *,
    client: openai.AsyncOpenAI | None,
    base_url: str | None,
    api_key: str | None,
    max_retries: int,
    timeout: float | None,
) -> openai.AsyncOpenAI:
    """The client to use: the caller's, or a new one from the arguments and the environment."""
    if client is not None:
        if base_url is not None or api_key is not None:
            raise UsageError("pass either client= or base_url=/api_key=, not both")
        return client
    base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
    api_key = api_key or os.environ.get("OPENAI_API_KEY") or None
    if api_key is None:
        if base_url is None:
            raise UsageError(
                "no OpenAI API key: set OPENAI_API_KEY (or pass api_key=), or pass base_url="
                " for a compatible server that needs none"
            )
        api_key = NO_KEY
    if timeout is None:
        return openai.AsyncOpenAI(api_key=api_key, base_url=base_url, max_retries=max_retries)
    return openai.AsyncOpenAI(
        api_key=api_key, base_url=base_url, max_retries=max_retries, timeout=timeout
    )


def provider_error(provider: str, exc: openai.OpenAIError) -> ProviderError:
    """The SDK's error as a :class:`ProviderError`: the server's own words, where, what to try."""
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        message = error_message(exc.body, exc.message)
        if message.startswith("Error code:"):  # the SDK's own, when the body said nothing
            message = f"no explanation in the answer ({exc.response.reason_phrase or 'empty'})"
        return ProviderError(
            provider,
            f"{message} ({_where(exc)}){_HINTS.get(status, '')}",
            status=status,
            retryable=retryable_status(status),
        )
    if isinstance(exc, openai.APIConnectionError):
        what = "timed out" if isinstance(exc, openai.APITimeoutError) else "could not connect"
        return ProviderError(
            provider,
            f"{what}: {_where(exc)} ({_cause(exc)}); is the server running at that address?",
            retryable=True,
        )
    if isinstance(exc, openai.APIError):  # an error event inside a stream
        return ProviderError(provider, error_message(exc.body, exc.message))
    return ProviderError(provider, one_line(str(exc)))


# What to try, by status, for the mistakes people make first with a compatible server.
_HINTS = {
    401: "; check the API key",
    404: "; check the model name, and that the base URL ends where the API begins (often /v1)",
}


def _where(exc: openai.APIError) -> str:
    request = getattr(exc, "request", None)
    if request is None:
        return "no request"
    return f"{request.method} {request.url}"


def stream_error(provider: str, exc: openai.OpenAIError) -> Exception:
    """An error met while reading a stream: a dropped connection is worth a retry.

    The request was answered, so the server was reached: a connection error now is the
    stream cut off (the server died or dropped it), not a server that cannot be reached.
    """
    if isinstance(exc, openai.APIConnectionError):
        what = "timed out" if isinstance(exc, openai.APITimeoutError) else "dropped"
        message = f"the connection {what} mid-answer: {_where(exc)} ({_cause(exc)})"
        return StreamBroken(ProviderError(provider, message, retryable=True))
    return provider_error(provider, exc)


def cut_short(provider: str) -> StreamBroken:
    """The stream ended before the reply said it was complete."""
    return StreamBroken(
        ProviderError(provider, "the stream ended before the reply was complete", retryable=True)
    )


def empty_stream(provider: str) -> ProviderError:
    """The server answered with a stream that held nothing at all, and nothing when asked
    for the whole reply: it likely refused."""
    return ProviderError(provider, "the server answered with an empty stream, no reply at all")


def _cause(exc: BaseException) -> str:
    cause = exc.__cause__ or exc.__context__
    return one_line(f"{type(cause).__name__}: {cause}") if cause is not None else "no detail"


def chat_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """Tools in Chat Completions' shape."""
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": dict(t.parameters),
            },
        }
        for t in tools
    ]


def responses_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """Tools in the Responses API's shape; not strict, since our schemas allow defaults."""
    return [
        {
            "type": "function",
            "name": t.name,
            "description": t.description,
            "parameters": dict(t.parameters),
            "strict": False,
        }
        for t in tools
    ]
