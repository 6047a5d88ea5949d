"""The store the ADK session service's store-bound tests run on: SQLite, and Postgres."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from steerable.store import Store
from tests.integrations.langgraph_saver.stores import open_store


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """A fresh SQLite file, or a fresh Postgres database (skipped without a server)."""
    async with open_store(request.param, tmp_path) as opened:
        yield opened
