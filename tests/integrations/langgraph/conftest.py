"""The store the LangGraph tests that touch one run on: SQLite, then Postgres (a fresh
database of its own, migrated, dropped after; skipped without a server, or failed under
``STEERABLE_REQUIRE_SERVERS=1``), opened by the saver tests' ``open_store``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from steerable.store import Store
from tests.integrations.langgraph_saver.stores import open_store


@pytest.fixture(params=["sqlite", "postgres"])
async def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """A fresh store of each kind, with the service's tables."""
    async with open_store(request.param, tmp_path) as store:
        yield store
