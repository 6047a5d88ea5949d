"""Picking a model by a string, keys from the environment, and the extras' import errors."""

from __future__ import annotations

import subprocess
import sys

import pytest

from steerable import Model, ModelSettings, Runner, Spec
from steerable.errors import UsageError
from steerable.models.anthropic import AnthropicModel
from steerable.models.openai import OpenAIChatModel, OpenAIResponsesModel
from steerable.models.registry import model_from_string
from tests.models.wire import WireServer, chat_stream


async def test_openai_is_the_responses_api_and_a_base_url_makes_it_chat_completions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    hosted = model_from_string("openai:gpt-5-mini")
    assert isinstance(hosted, OpenAIResponsesModel)
    assert (hosted.name, hosted.client.api_key) == ("openai-responses:gpt-5-mini", "sk-env")
    local = model_from_string("openai:llama3.1:8b", base_url="http://127.0.0.1:1/v1")
    assert isinstance(local, OpenAIChatModel)
    assert (local.model, local.max_tokens_param) == ("llama3.1:8b", "max_tokens")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:2/v1")
    from_env = model_from_string("openai:qwen")
    assert isinstance(from_env, OpenAIChatModel)
    assert str(from_env.client.base_url) == "http://127.0.0.1:2/v1/"
    assert from_env.max_tokens_param == "max_tokens"  # the compatible server's settings
    assert from_env.client.api_key == "sk-env"
    for made in (hosted, local, from_env):
        await made.aclose()


async def test_the_explicit_openai_apis_and_anthropic(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-env")
    chat = model_from_string("openai-chat:gpt-4.1")
    responses = model_from_string("openai-responses:gpt-4.1", base_url="http://127.0.0.1:1/v1")
    claude = model_from_string("anthropic:claude-sonnet-4-5", max_tokens=1000)
    assert isinstance(chat, OpenAIChatModel)
    assert chat.max_tokens_param == "max_completion_tokens"
    assert isinstance(responses, OpenAIResponsesModel)
    assert isinstance(claude, AnthropicModel)
    assert (claude.name, claude.max_tokens) == ("anthropic:claude-sonnet-4-5", 1000)
    for made in (chat, responses, claude):
        assert isinstance(made, Model)
        await made.aclose()


def test_a_missing_key_says_which_variable_to_set() -> None:
    with pytest.raises(UsageError, match="OPENAI_API_KEY"):
        model_from_string("openai:gpt-5-mini")
    with pytest.raises(UsageError, match="ANTHROPIC_API_KEY"):
        model_from_string("anthropic:claude-sonnet-4-5")


@pytest.mark.parametrize("spec", ["gpt-4o", "openai:", ":gpt-4o", "mistral:large"])
def test_a_bad_name_is_a_usage_error(spec: str) -> None:
    with pytest.raises(UsageError, match="openai"):
        model_from_string(spec)


async def test_a_compatible_server_by_string_end_to_end() -> None:
    with WireServer(chat_stream(["hi ", "there"])) as server:
        model = model_from_string("openai:local-model", base_url=f"{server.url}/v1")
        settings = ModelSettings(max_tokens=64)
        result = await Runner.run(Spec(settings=settings), "hello", model)
        await model.aclose()
    assert result.output == "hi there"
    assert server.requests[0].path == "/v1/chat/completions"
    assert server.bodies[0]["max_tokens"] == 64
    assert server.requests[0].headers["authorization"] == "Bearer no-key"


def test_the_registry_imports_no_sdk_until_asked() -> None:
    code = (
        "import sys, steerable.models.registry\n"
        "print(sorted({'openai', 'anthropic'} & set(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
