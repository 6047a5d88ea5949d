"""OpenAI's models, and any server that speaks OpenAI's wire format; needs ``steerable[openai]``.

- :class:`OpenAIChatModel`: the Chat Completions API (``/chat/completions``), which OpenAI
  and nearly every compatible server (vLLM, Ollama, LM Studio, llama.cpp, OpenRouter...)
  speak. Pass ``base_url`` for a compatible server.
- :class:`OpenAIResponsesModel`: the Responses API (``/responses``), OpenAI's own, which
  returns reasoning items that must be sent back on the next request.

Both go through the official SDK's ``AsyncOpenAI`` (pass your own with ``client=``), stream
the reply, and use the SDK's retries for rate limits, 5xx and dropped connections (it honours
``Retry-After``). See ``docs/models.md``.
"""

from __future__ import annotations

from steerable._extras import missing_extra

try:
    import openai as _openai  # noqa: F401  (the check that the extra is installed)
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise missing_extra("steerable.models.openai", "openai", "openai", exc) from None

from steerable.models.openai._chat import OpenAIChatModel
from steerable.models.openai._responses import OpenAIResponsesModel

__all__ = ["OpenAIChatModel", "OpenAIResponsesModel"]
