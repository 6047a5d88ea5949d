"""A model picked by a string: ``"openai:gpt-5-mini"``, ``"anthropic:claude-sonnet-4-5"``.

The part before the first colon names the provider, the rest is the provider's model name
(which may hold colons itself: ``"openai:llama3.1:8b"``). The provider's module is imported
only when it is picked, so a missing SDK is only an error for the one who asks for it.

======================  ===============================================================
``openai:NAME``         OpenAI's Responses API; with a ``base_url`` (or
                        ``OPENAI_BASE_URL``), Chat Completions, which compatible
                        servers (vLLM, Ollama, LM Studio, llama.cpp...) speak
``openai-chat:NAME``    Chat Completions, always
``openai-responses:N``  the Responses API, always
``anthropic:NAME``      Anthropic's Messages API
======================  ===============================================================

Keys come from ``OPENAI_API_KEY`` and ``ANTHROPIC_API_KEY`` unless ``api_key`` is given; a
compatible server given by ``base_url`` (or ``OPENAI_BASE_URL``) needs none, and is sent
``max_tokens`` rather than OpenAI's ``max_completion_tokens``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, TypeAlias

from steerable.errors import UsageError

if TYPE_CHECKING:
    from steerable.models.anthropic import AnthropicModel
    from steerable.models.openai import OpenAIChatModel, OpenAIResponsesModel

__all__ = ["PROVIDERS", "ProviderModel", "model_from_string"]

ProviderModel: TypeAlias = "OpenAIChatModel | OpenAIResponsesModel | AnthropicModel"
"""What :func:`model_from_string` returns: a :class:`~steerable.Model` with ``aclose()``."""

PROVIDERS = ("openai", "openai-chat", "openai-responses", "anthropic")


def model_from_string(
    spec: str, *, base_url: str | None = None, api_key: str | None = None, **options: Any
) -> ProviderModel:
    """The model ``spec`` names (see the module); ``options`` go to the model's constructor.

    Raises :class:`UsageError` for an unknown provider or a missing key, and ImportError
    naming the extra to install when the provider's SDK is missing.
    """
    provider, colon, name = spec.partition(":")
    if not colon or not provider or not name:
        raise UsageError(
            f"a model is named 'provider:model', like 'openai:gpt-5-mini' or"
            f" 'anthropic:claude-sonnet-4-5', not {spec!r}"
        )
    compatible = base_url or os.environ.get("OPENAI_BASE_URL")
    if provider == "openai":
        provider = "openai-chat" if compatible else "openai-responses"
    if provider == "openai-chat":
        from steerable.models.openai import OpenAIChatModel

        if compatible and "max_tokens_param" not in options:
            options["max_tokens_param"] = "max_tokens"  # what compatible servers all know
        return OpenAIChatModel(name, base_url=base_url, api_key=api_key, **options)
    chat_only = sorted({"tool_choice", "stream", "max_tokens_param"} & options.keys())
    if chat_only and provider in PROVIDERS:
        raise UsageError(
            f"{', '.join(chat_only)}: settings of Chat Completions models (openai: with a"
            f" base URL, openai-chat:), not of {provider}:"
        )
    if provider == "openai-responses":
        from steerable.models.openai import OpenAIResponsesModel

        return OpenAIResponsesModel(name, base_url=base_url, api_key=api_key, **options)
    if provider == "anthropic":
        from steerable.models.anthropic import AnthropicModel

        return AnthropicModel(name, base_url=base_url, api_key=api_key, **options)
    known = ", ".join(PROVIDERS)
    raise UsageError(f"unknown model provider {provider!r}; the providers are: {known}")
