"""The boundary of every extra: a server store's driver, a provider's SDK, only behind it.

An import of such a package without its dependency fails with the one error that names the
extra to install (one wording, from ``steerable._extras``); ``import steerable`` (and the
store contract, the conformance suite) loads none of them.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

EXTRAS = {  # package: (extra, the top-level modules it needs)
    "steerable.stores.postgres": ("postgres", ("asyncpg",)),
    "steerable.stores.mysql": ("mysql", ("aiomysql", "pymysql")),
    "steerable.stores.mongodb": ("mongodb", ("pymongo", "bson")),
    "steerable.models.openai": ("openai", ("openai",)),
    "steerable.models.anthropic": ("anthropic", ("anthropic",)),
    "steerable.service.http": ("serve", ("fastapi", "starlette")),
    "steerable.service.client": ("serve", ("httpx",)),
    "steerable.integrations.openai_agents": ("openai-agents", ("agents",)),
    "steerable.integrations.pydantic_ai": ("pydantic-ai", ("pydantic_ai",)),
    "steerable.integrations.langgraph": ("langgraph", ("langgraph", "langchain")),
    "steerable.integrations.adk": ("adk", ("google",)),
}


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize("package", sorted(EXTRAS))
def test_without_its_driver_the_import_names_the_extra(package: str) -> None:
    extra, modules = EXTRAS[package]
    hide = "; ".join(f"sys.modules[{m!r}] = None" for m in modules)
    run = _python(f"import sys; {hide}; import {package}")
    assert run.returncode != 0
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith(f"ImportError: {package} needs "), run.stderr
    assert last.endswith(f"pip install 'steerable[{extra}]'"), run.stderr


def test_the_core_and_the_suite_load_no_driver_and_no_sdk() -> None:
    drivers = sorted({m for _, modules in EXTRAS.values() for m in modules} | {"uvicorn"})
    run = _python(
        "import sys, steerable, steerable.store, steerable.stores, steerable.stores.memory,"
        " steerable.stores.sqlite, steerable.testing, steerable.service, steerable.stores.url,"
        " steerable.cli, steerable.integrations\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {drivers!r}))"
    )
    assert run.stdout.strip() == "[]", run.stderr


def test_the_pytest_plugin_imports_nothing_of_steerable() -> None:
    # pytest loads it in every project where steerable is installed
    run = _python("import sys, _steerable_pytestplugin; print('steerable' in sys.modules)")
    assert run.stdout.strip() == "False", run.stderr
