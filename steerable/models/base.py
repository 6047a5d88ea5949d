"""What the loop sends a model and what it gets back."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from steerable.messages import Message


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as a model sees it: a name, a description and a JSON schema of its arguments."""

    name: str
    description: str
    parameters: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ModelSettings:
    """Settings passed to every request. ``extra`` goes to the provider as it is."""

    temperature: float | None = None
    max_tokens: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One request: instructions, the transcript so far, the tools, the settings."""

    instructions: str | None
    messages: Sequence[Message]
    tools: Sequence[ToolSpec] = ()
    settings: ModelSettings = ModelSettings()


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens a request (or a whole run) used."""

    input_tokens: int = 0
    output_tokens: int = 0
    requests: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.requests + other.requests,
        )

    @property
    def total_tokens(self) -> int:
        """Input and output tokens together."""
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of the reply's text, as it arrives."""

    text: str


FinishReason = Literal["stop", "tool_calls", "length", "content_filter", "other"]
"""Why the model stopped writing: it was done, it called tools, it hit ``max_tokens``
(``"length"``: the reply is cut short), a provider's filter cut it, or something else."""


@dataclass(frozen=True, slots=True)
class Reply:
    """The whole reply: an assistant message, the tokens it took, why it stopped.

    ``finish_reason`` is ``None`` when the model did not say (a scripted model, a server
    that reports none).
    """

    message: Message
    usage: Usage = Usage()
    finish_reason: FinishReason | None = None


ModelEvent = TextDelta | Reply


@runtime_checkable
class Model(Protocol):
    """Anything that answers a request with a stream of events ending in one Reply."""

    @property
    def name(self) -> str:
        """A short name for logs and events (``"openai:gpt-5"``, ``"scripted"``)."""
        ...

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Yield text deltas as they come, then exactly one :class:`Reply`."""
        ...
