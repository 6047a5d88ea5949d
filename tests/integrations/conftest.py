"""Fixtures every framework's process tests share."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest


@pytest.fixture
async def postgres_url() -> AsyncIterator[str]:
    """A fresh Postgres database's store URL (skipped, or failed, without a server), dropped
    after the test."""
    from tests.service.test_replicas import _postgres_url
    from tests.stores.postgres.support import fresh_database

    async with fresh_database("steerable_integration_") as name:
        yield _postgres_url(name)
