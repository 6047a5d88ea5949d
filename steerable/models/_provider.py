"""What the provider adapters share: the retry of a stream that broke before it said anything,
the reading of a provider's error body, and the compact JSON they keep verbatim blocks in.

Retries happen in two places. The provider's SDK retries a request that got no answer, a
rate limit (429) or a server error (408, 409, 5xx), sleeping as ``Retry-After`` says; that
covers everything up to the first byte of the reply. A stream that breaks *after* it began
(the connection drops, an ``overloaded_error`` arrives mid-stream, the stream just ends) is
retried here, with the same backoff, but only while nothing of it was shown: once a text
delta went out to the run's events, a retry would show the user a second, different start
of the answer, so the run fails instead (a resumed run redoes the step).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import json
import random
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any, ClassVar, Self

from steerable.errors import ProviderError
from steerable.models.base import ModelEvent, ModelRequest

__all__ = [
    "ClientModel",
    "StreamBroken",
    "compact_json",
    "error_message",
    "one_line",
    "retry_stream",
    "retryable_status",
]

_INITIAL_DELAY = 0.5
_MAX_DELAY = 8.0


class StreamBroken(Exception):
    """A stream that began and then broke off; worth another try if nothing was shown."""

    def __init__(self, error: ProviderError) -> None:
        super().__init__(str(error))
        self.error = error


def retryable_status(status: int) -> bool:
    """Statuses the SDKs retry and a later try may get past: timeouts, rate limits, 5xx."""
    return status in (408, 409, 429) or status >= 500


def error_message(body: object, fallback: str) -> str:
    """The provider's own explanation from an error body, in a line or two.

    Reads OpenAI's and Anthropic's shapes (``{"error": {"message": ...}}``) and the
    ``{"detail": ...}`` of servers built on FastAPI (llama-cpp-python, vLLM's older ones),
    whose detail may be a list of validation errors. A long, many-line explanation (a
    server's validation report) is cut to its first lines: :func:`one_line`.
    """
    return one_line(_explanation(body) or fallback)


def _explanation(body: object) -> str:
    if isinstance(body, str):
        return body
    if not isinstance(body, dict):
        return ""
    inner = body.get("error", body)
    if isinstance(inner, dict) and isinstance(inner.get("message"), str) and inner["message"]:
        return str(inner["message"])
    if isinstance(inner, str) and inner:
        return inner
    for key in ("message", "detail"):
        value = body.get(key)
        if isinstance(value, str) and value:
            return value
        if isinstance(value, list) and value:  # FastAPI's validation errors
            return "; ".join(_validation_error(v) for v in value[:3])
    return ""


def _validation_error(error: object) -> str:
    if not isinstance(error, dict):
        return str(error)
    where = ".".join(str(p) for p in error.get("loc", ()) if p != "body")
    message = str(error.get("msg", error))
    return f"{where}: {message}" if where else message


def one_line(text: str, limit: int = 240) -> str:
    """``text`` on one line of at most ``limit`` characters, links to more help left out."""
    lines = [" ".join(line.split()) for line in text.splitlines()]
    kept = [line for line in lines if line and not line.startswith("For further information")]
    joined = " / ".join(kept[:4])
    return joined if len(joined) <= limit else joined[: limit - 3].rstrip() + "..."


def compact_json(value: Any) -> str:
    """JSON text without padding, Unicode kept as it is: how verbatim blocks are stored."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _delay(attempt: int) -> float:
    return min(_INITIAL_DELAY * 2.0**attempt, _MAX_DELAY) * (1 - 0.25 * random.random())


async def retry_stream(
    attempt: Callable[[], AsyncGenerator[ModelEvent, None]], *, retries: int
) -> AsyncIterator[ModelEvent]:
    """Yield ``attempt()``'s events; a :class:`StreamBroken` before the first is retried.

    At most ``retries`` more attempts, with exponential backoff and jitter. A broken stream
    that already yielded something, or the last one, raises its :class:`ProviderError`.
    """
    tries = 0
    while True:
        shown = False
        try:
            async with contextlib.aclosing(attempt()) as events:
                async for event in events:
                    shown = True
                    yield event
            return
        except StreamBroken as broken:
            if shown or tries >= retries:
                raise broken.error from broken.__cause__
        await asyncio.sleep(_delay(tries))
        tries += 1


class ClientModel(abc.ABC):
    """What every provider model shares: its name, its HTTP client's life, its repr, and a
    stream that retries an attempt which broke before it showed anything.

    A subclass sets ``provider`` and, in ``__init__``, ``self.model`` and ``self.client``
    (an SDK client with ``base_url``, ``max_retries`` and an async ``close()``), and says how
    a request becomes a body and how one attempt streams it.
    """

    provider: ClassVar[str]
    model: str
    client: Any

    @property
    def name(self) -> str:
        """``"<provider>:<model>"``."""
        return f"{self.provider}:{self.model}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.model!r}, base_url={str(self.client.base_url)!r})"

    async def aclose(self) -> None:
        """Close the HTTP client (also one you passed in)."""
        await self.client.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    @abc.abstractmethod
    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body this model sends for ``request`` (``stream`` included)."""

    @abc.abstractmethod
    def _attempt(self, body: dict[str, Any]) -> AsyncGenerator[ModelEvent, None]:
        """One try at streaming ``body``; raises :class:`StreamBroken` if it breaks off."""

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Stream the reply to ``request``: text deltas, then the whole reply."""
        body = self.request_body(request)
        return retry_stream(lambda: self._attempt(body), retries=self.client.max_retries)
