"""The guard of tests/conftest.py: no test reaches a hosted model."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from tests.conftest import HostedNetworkBlocked

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"


def test_the_providers_keys_are_unset() -> None:
    assert "OPENAI_API_KEY" not in os.environ and "ANTHROPIC_API_KEY" not in os.environ


def test_loopback_is_allowed_and_the_rest_refused(hosted_network_attempts: list[str]) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        with socket.create_connection(listener.getsockname(), timeout=5):
            pass
    assert hosted_network_attempts == []
    with pytest.raises(HostedNetworkBlocked):
        socket.getaddrinfo("api.anthropic.com", 443)
    with socket.socket() as sock, pytest.raises(HostedNetworkBlocked):
        sock.connect(("93.184.216.34", 443))
    assert len(hosted_network_attempts) == 2
    hosted_network_attempts.clear()  # refused as they should be: not this test's failure


def test_a_run_against_a_hosted_model_fails_its_test(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(
        """
        import asyncio
        from steerable import Runner, Spec
        from steerable.models.openai import OpenAIResponsesModel

        def test_calls_openai():
            async def run():
                model = OpenAIResponsesModel("gpt-5-mini", api_key="sk-real", max_retries=0)
                async with model:
                    return await Runner.run(Spec(), "hi", model)
            result = asyncio.run(run())
            assert result.reason == "failed"  # the run swallowed it; the guard must not
        """
    )
    outcome = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    outcome.assert_outcomes(passed=1, errors=1)
    assert "tried to reach beyond loopback: ('api.openai.com'" in outcome.stdout.str()
