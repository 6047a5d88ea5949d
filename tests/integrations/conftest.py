"""Fixtures every framework's tests share: a fresh Postgres database, and the stores the
tests that touch a store run on (SQLite and Postgres)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from steerable import Store
from steerable.stores.url import open_url


@pytest.fixture
async def postgres_url() -> AsyncIterator[str]:
    """A fresh Postgres database's store URL (skipped, or failed, without a server), dropped
    after the test."""
    from tests.service.test_replicas import _postgres_url
    from tests.stores.postgres.support import fresh_database

    async with fresh_database("steerable_integration_") as name:
        yield _postgres_url(name)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.slow)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A SQLite file's store URL, or a fresh Postgres database's (skipped without one)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'integration.db'}"
    url = request.getfixturevalue("postgres_url")
    assert isinstance(url, str)
    return url


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    """The store ``store_url`` names, opened for the test."""
    async with open_url(store_url) as opened:
        yield opened
