"""``steerable serve --model``: a real model with tools and no agent module; IPv6 hosts.

The model is a local HTTP server speaking Chat Completions (:mod:`tests.models.wire`), as
the chat's tests use; the served turn's requests reach it and its answer is the turn's.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.cli.test_serve import Served, cli, serve, served
from tests.models.wire import WireServer, chat_stream

__all__ = ["served"]  # a fixture, used by name

pytestmark = pytest.mark.slow

TOOLS = '''
from steerable import tool


@tool
def lookup(name: str) -> str:
    """Look a name up."""
    return f"{name} is in config.toml"


TOOLS = [lookup]
'''


def no_keys() -> dict[str, str]:
    """The environment without any provider's settings (the wire server needs no key)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}


async def test_a_turn_through_model_reaches_the_server_calls_a_tool_and_answers(
    tmp_path: Path, served: list[Served]
) -> None:
    (tmp_path / "lookup_tools.py").write_text(TOOLS)
    call = ("call_1", "lookup", ['{"name": ', '"db"}'])
    answers = (chat_stream([], [call]), chat_stream(["It is in ", "config.toml."]))
    with WireServer(*answers, strict=True) as model:
        flags = ["--model", "openai:test-model", "--base-url", f"{model.url}/v1"]
        flags += ["--tools", f"{tmp_path / 'lookup_tools.py'}:TOOLS", "--tool-choice", "auto"]
        flags += ["--no-stream", "--max-tokens", "200", "--instructions", "Be brief."]
        server = serve(
            served, f"sqlite:///{tmp_path / 's.db'}", *flags, log=tmp_path / "s.log", env=no_keys()
        )
        from steerable.service.client import Client

        async with Client(server.url) as client:
            sent = await client.send("s1", "where is the db?")
            turn = await client.turn("s1", sent.turn, wait=30)
            transcript = await client.transcript("s1")
    assert (turn["state"], turn["output"]) == ("completed", "It is in config.toml."), turn
    first, second = model.bodies
    assert [t["function"]["name"] for t in first["tools"]] == ["lookup"]
    assert (first["tool_choice"], first["stream"], first["max_tokens"]) == ("auto", False, 200)
    assert first["messages"][0] == {"role": "system", "content": "Be brief."}
    assert first["messages"][-1]["content"] == "where is the db?"
    assert second["messages"][-1]["content"] == "db is in config.toml"  # the tool's result
    assert [m["role"] for m in transcript["messages"]] == ["user", "assistant", "user", "assistant"]


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--model", "nocolon"], "--model nocolon: a model is named 'provider:model'"),
        (["--model", "nosuch:m"], "unknown model provider 'nosuch'"),
        (["--model", "anthropic:claude"], "ANTHROPIC_API_KEY"),
        (["--model", "openai:m", "--tools", "no.such.module:TOOLS"], "--tools no.such.module"),
        (["--model", "openai:m", "--tools", "examples.tools.slow:NOPE"], "no attribute 'NOPE'"),
        (["--model", "openai:m", "--tools", "examples.tools.slow"], "module:attribute"),
        (["--model", "openai:m", "--max-steps", "0"], "--max-steps"),
        (["--model", "openai:m", "--agent", "examples.agents.two_tools:AGENT"], "give one"),
        (["--tools", "examples.tools.slow:TOOLS"], "--tools is a setting of --model"),
        (["--no-stream"], "--no-stream is a setting of --model"),
        (["--model", "anthropic:c", "--tool-choice", "auto"], "settings of Chat Completions"),
    ],
)
def test_a_bad_model_or_tools_is_one_line_and_status_2(
    flags: list[str], says: str, tmp_path: Path
) -> None:
    done = cli("serve", "--store", f"sqlite:///{tmp_path / 'x.db'}", *flags)
    assert done.returncode == 2, done.stderr
    assert says in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "x.db").exists()  # nothing was opened


async def test_an_agent_given_by_file_path_is_served(tmp_path: Path, served: list[Served]) -> None:
    agent = tmp_path / "my_agent.py"
    agent.write_text(
        "from steerable.service.demo import demo_agent\n\nAGENT = demo_agent()\n",
    )
    server = serve(
        served, f"sqlite:///{tmp_path / 's.db'}", "--agent", f"{agent}:AGENT", log=tmp_path / "l"
    )
    from steerable.service.client import Client

    async with Client(server.url) as client:
        sent = await client.send("s1", "hi")
        assert (await client.turn("s1", sent.turn, wait=30))["output"] == "answered: hi"


# -- IPv6 -----------------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["::1", "[::1]"])
async def test_ipv6_loopback_is_served_bare_or_in_brackets(
    host: str, tmp_path: Path, served: list[Served]
) -> None:
    server = serve(served, f"sqlite:///{tmp_path / 's.db'}", "--host", host, log=tmp_path / "l")
    assert server.url.startswith("http://[::1]:")
    from steerable.service.client import Client

    async with Client(server.url) as client:
        sent = await client.send("s1", "hello")
        assert (await client.turn("s1", sent.turn, wait=30))["state"] == "completed"


@pytest.mark.parametrize(
    ("host", "says"),
    [
        ("[::]", "--insecure-no-auth"),  # every address, bracketed: not loopback
        ("[nope]", "brackets hold an IPv6 address"),
        ("[127.0.0.1]", "brackets hold an IPv6 address"),
        ("[::1", "brackets hold an IPv6 address"),
    ],
)
def test_a_bracketed_host_that_is_not_ipv6_loopback_is_one_line(
    host: str, says: str, tmp_path: Path
) -> None:
    done = cli("serve", "--store", f"sqlite:///{tmp_path / 'x.db'}", "--host", host)
    assert done.returncode == 2, done.stderr
    assert says in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
