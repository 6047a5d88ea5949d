"""The stores the Pydantic AI tests that touch a store run on: SQLite and Postgres."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from steerable import Store
from steerable.stores.url import open_url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.slow)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A SQLite file's store URL, or a fresh Postgres database's (skipped without one)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'pa.db'}"
    url = request.getfixturevalue("postgres_url")
    assert isinstance(url, str)
    return url


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    """The store ``store_url`` names, opened for the test."""
    async with open_url(store_url) as opened:
        yield opened
