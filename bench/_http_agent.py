"""The agent ``bench.http`` serves: the keyless demo agent, its tool of ``BENCH_HTTP_TOOL`` s."""

from __future__ import annotations

import os

from steerable.service.agent import ReActAgent
from steerable.service.demo import demo_agent


def agent() -> ReActAgent:
    """The demo agent: one ``work`` call (a sleep of ``BENCH_HTTP_TOOL`` seconds), the answer."""
    return demo_agent(seconds=float(os.environ.get("BENCH_HTTP_TOOL", "0.3")))
