"""The driver boundary of every server store: its driver only behind its extra.

An import of a store package without its driver fails with the one error that names the
extra to install; ``import steerable`` (and the store contract, the conformance suite)
loads no driver at all.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

STORES = {  # package: (extra, the driver's top-level modules)
    "steerable.stores.postgres": ("postgres", ("asyncpg",)),
    "steerable.stores.mysql": ("mysql", ("aiomysql", "pymysql")),
    "steerable.stores.mongodb": ("mongodb", ("pymongo", "bson")),
}


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize("package", sorted(STORES))
def test_without_its_driver_the_import_names_the_extra(package: str) -> None:
    extra, modules = STORES[package]
    hide = "; ".join(f"sys.modules[{m!r}] = None" for m in modules)
    run = _python(f"import sys; {hide}; import {package}")
    assert run.returncode != 0
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith(f"ImportError: {package} needs "), run.stderr
    assert last.endswith(f"pip install 'steerable[{extra}]'"), run.stderr


def test_the_core_and_the_suite_load_no_driver() -> None:
    drivers = sorted(m for _, modules in STORES.values() for m in modules)
    run = _python(
        "import sys, steerable, steerable.store, steerable.stores, steerable.stores.memory,"
        " steerable.stores.sqlite, steerable.testing\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {drivers!r}))"
    )
    assert run.stdout.strip() == "[]", run.stderr


def test_the_pytest_plugin_imports_nothing_of_steerable() -> None:
    # pytest loads it in every project where steerable is installed
    run = _python("import sys, _steerable_pytestplugin; print('steerable' in sys.modules)")
    assert run.stdout.strip() == "False", run.stderr
