"""Fixtures the Pydantic AI tests share."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest


@pytest.fixture
async def postgres_url() -> AsyncIterator[str]:
    """A fresh Postgres database's URL (skipped, or failed, without a server), dropped after."""
    from tests.stores.postgres.support import fresh_database, server_address

    async with fresh_database("steerable_pydantic_ai_") as name:
        host, port = server_address()
        yield f"postgresql://postgres@{host}:{port}/{name}"
