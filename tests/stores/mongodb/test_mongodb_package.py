"""The MongoDB store's packaging: what it takes (its exported names: tests/test_exports.py;
the driver boundary of every store: tests/test_extras.py)."""

from __future__ import annotations

import pytest

from steerable.errors import UsageError
from steerable.stores.mongodb import MongoStore
from tests.stores.mongodb._server import sync_client


def test_a_sync_database_is_refused_clearly() -> None:
    with (
        sync_client("mongodb://127.0.0.1:1", connect=False) as client,
        pytest.raises(UsageError, match="AsyncDatabase"),
    ):
        MongoStore(client["db"])  # type: ignore[arg-type]
