"""The agent ``steerable serve`` runs: one a module or file names, or a model with tools.

``--agent module:NAME`` or ``--agent path/to/file.py:NAME`` names an agent (``run_turn``
and ``steers_per_turn``) or a function of no arguments making one. ``--model
provider:name`` needs no module: it serves steerable's own ReAct loop over the model
``steerable chat`` would pick for that string, with the chat's options (``--base-url``,
``--tools MODULE:NAME`` repeatable, ``--instructions``, ``--max-steps``, ``--tool-choice``,
``--no-stream``) and ``--max-tokens``.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from steerable.errors import UsageError

if TYPE_CHECKING:
    from steerable.models.registry import ProviderModel
    from steerable.service import Agent

__all__ = ["DEFAULT_AGENT", "MODEL_FLAGS", "add_agent_flags", "agent_of", "load_agent"]

DEFAULT_AGENT = "steerable.service.demo:demo_agent"

MODEL_FLAGS = (
    ("base_url", "--base-url"),
    ("tools", "--tools"),
    ("instructions", "--instructions"),
    ("max_steps", "--max-steps"),
    ("tool_choice", "--tool-choice"),
    ("no_stream", "--no-stream"),
    ("max_tokens", "--max-tokens"),
)
"""The settings of ``--model`` (argparse's name, the flag): refused without it."""


def load_agent(spec: str) -> Agent:
    """The agent ``module:attribute`` names (a dotted module or a ``.py`` path).

    The attribute is an agent (``run_turn`` and ``steers_per_turn``), or a function of no
    arguments that makes one.
    """
    from steerable.cli.chat import import_attribute

    shape = "module:attribute or file.py:attribute, like examples.agents.two_tools:AGENT"
    value: Any = import_attribute(spec, "--agent", shape)
    if not _is_agent(value) and callable(value):
        try:
            value = value()
        except Exception as exc:  # the user's factory: say what it raised, in one line
            raise UsageError(f"--agent {spec}: {type(exc).__name__}: {exc}") from None
    if not _is_agent(value):
        raise UsageError(
            f"--agent {spec}: {value!r:.80} is not an agent (run_turn(turn) and steers_per_turn)"
        )
    agent: Agent = value
    return agent


def _is_agent(value: object) -> bool:
    return callable(getattr(value, "run_turn", None)) and hasattr(value, "steers_per_turn")


def agent_of(args: argparse.Namespace) -> tuple[Agent, ProviderModel | None]:
    """The agent the flags ask for, and the model to close when serving ends (if any)."""
    given = [flag for name, flag in MODEL_FLAGS if getattr(args, name) not in (None, False)]
    if args.model is None:
        if given:
            raise UsageError(f"{given[0]} is a setting of --model: give --model provider:name")
        return load_agent(args.agent or DEFAULT_AGENT), None
    if args.agent is not None:
        raise UsageError("--agent and --model: give one (--model serves steerable's own loop)")
    return _model_agent(args)


def _model_agent(args: argparse.Namespace) -> tuple[Agent, ProviderModel]:
    from steerable.cli.chat import load_tools
    from steerable.models.base import ModelSettings
    from steerable.models.registry import model_from_string
    from steerable.service import ReActAgent
    from steerable.spec import Spec

    if args.max_steps is not None and args.max_steps < 1:
        raise UsageError(f"--max-steps is a whole number >= 1, not {args.max_steps}")
    if args.max_tokens is not None and args.max_tokens < 1:
        raise UsageError(f"--max-tokens is a whole number >= 1, not {args.max_tokens}")
    tools = [t for spec in args.tools or () for t in load_tools(spec)]
    spec = Spec(  # a bad tool is told here, before anything opens
        tools=tools,
        instructions=args.instructions,
        max_steps=args.max_steps or 32,
        settings=ModelSettings(max_tokens=args.max_tokens),
    )
    options: dict[str, Any] = {}
    if args.tool_choice is not None:
        options["tool_choice"] = args.tool_choice
    if args.no_stream:
        options["stream"] = False
    try:
        model = model_from_string(args.model, base_url=args.base_url, **options)
    except UsageError as exc:
        raise UsageError(f"--model {args.model}: {exc}") from None
    except ImportError as exc:  # the provider's SDK: the message names the extra
        raise UsageError(f"--model {args.model}: {exc}") from None
    return ReActAgent(spec, model), model


def add_agent_flags(run: argparse.ArgumentParser) -> None:
    """``--agent``, or ``--model`` and its settings."""
    run.add_argument(
        "--agent",
        metavar="MODULE:NAME",
        help="the agent turns run, or a function making it: a module or a file.py"
        " (default: the keyless demo agent)",
    )
    run.add_argument(
        "--model",
        metavar="PROVIDER:NAME",
        help="serve steerable's own loop over this model instead, like openai:gpt-5-mini"
        " (no module needed; see steerable chat)",
    )
    run.add_argument(
        "--base-url",
        help="with --model: a compatible server, with an openai:, openai-chat: or"
        " openai-responses: model (default: $OPENAI_BASE_URL)",
    )
    run.add_argument(
        "--tools",
        action="append",
        metavar="MODULE:NAME",
        help="with --model: a list of tools (repeatable), like examples.tools.slow:TOOLS",
    )
    run.add_argument("--instructions", help="with --model: the system prompt")
    run.add_argument("--max-steps", type=int, help="with --model: model requests per turn (32)")
    run.add_argument("--max-tokens", type=int, help="with --model: the most tokens per reply")
    run.add_argument(
        "--tool-choice",
        choices=("auto", "required", "none"),
        help="with --model: Chat Completions' tool_choice, sent with the tools (default: auto)",
    )
    run.add_argument(
        "--no-stream",
        action="store_true",
        help="with --model: ask for whole replies, for servers that cannot stream tool calls",
    )
