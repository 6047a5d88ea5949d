"""The core loads no database driver, provider SDK or web framework, and exports what it says."""

from __future__ import annotations

import json
import subprocess
import sys

import steerable

HEAVY = [
    "asyncpg",
    "aiomysql",
    "pymysql",
    "pymongo",
    "openai",
    "anthropic",
    "httpx",
    "starlette",
    "fastapi",
    "aiohttp",
    "sqlalchemy",
    "langgraph",
    "agents",
    "pytest",
]


def test_import_steerable_loads_no_driver_sdk_or_framework() -> None:
    code = (
        "import sys, json, steerable, steerable.stores.memory, steerable.stores.sqlite;"
        "print(json.dumps(sorted(m.split('.')[0] for m in sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout))
    assert loaded.isdisjoint(HEAVY), loaded & set(HEAVY)


def test_the_public_names_are_exactly_the_intended_ones() -> None:
    assert sorted(steerable.__all__) == sorted(
        [
            "CorruptRecord",
            "EndReason",
            "Event",
            "InvalidMessage",
            "Message",
            "Model",
            "ModelError",
            "ModelRequest",
            "ModelSettings",
            "Part",
            "ProviderError",
            "Reasoning",
            "Result",
            "Run",
            "Runner",
            "ScriptExhausted",
            "ScriptedModel",
            "Session",
            "Spec",
            "Steer",
            "SteerableError",
            "Store",
            "StoreError",
            "StoreUnavailable",
            "Text",
            "Tool",
            "ToolCall",
            "ToolResult",
            "TranscriptConflict",
            "Usage",
            "UsageError",
            "assistant",
            "open_session",
            "tool",
            "transcript_problems",
            "user",
        ]
    )
    for name in steerable.__all__:
        value = getattr(steerable, name)
        if isinstance(value, type) or (callable(value) and hasattr(value, "__code__")):
            assert value.__doc__, f"{name} has no docstring"
