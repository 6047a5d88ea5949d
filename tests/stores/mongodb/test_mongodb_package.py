"""The MongoDB store's packaging: an extra of its own, and nothing of it in the core."""

from __future__ import annotations

import subprocess
import sys

import pytest

from steerable.errors import UsageError
from steerable.stores.mongodb import MongoStore
from tests.stores.mongodb._server import sync_client


def test_without_pymongo_the_import_names_the_extra() -> None:
    code = "import sys; sys.modules['pymongo'] = None; import steerable.stores.mongodb"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode != 0
    assert "steerable.stores.mongodb needs pymongo >= 4.10 (" in done.stderr
    assert "pip install 'steerable[mongodb]'" in done.stderr


def test_the_core_does_not_import_pymongo() -> None:
    code = "import sys, steerable, steerable.store; print('pymongo' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "False", done.stderr


def test_a_sync_database_is_refused_clearly() -> None:
    with (
        sync_client("mongodb://127.0.0.1:1", connect=False) as client,
        pytest.raises(UsageError, match="AsyncDatabase"),
    ):
        MongoStore(client["db"])  # type: ignore[arg-type]


def test_the_exported_names() -> None:
    import steerable.stores.mongodb as package

    assert sorted(package.__all__) == [
        "COLLECTIONS",
        "MIGRATIONS",
        "MongoStore",
        "SCHEMA_VERSION",
        "migrate",
    ]
