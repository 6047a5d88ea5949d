"""The core loads no database driver, provider SDK or web framework."""

from __future__ import annotations

import json
import subprocess
import sys

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
