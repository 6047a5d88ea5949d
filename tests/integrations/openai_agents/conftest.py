"""Fixtures the OpenAI Agents SDK process tests share."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest


@pytest.fixture
async def postgres_url() -> AsyncIterator[str]:
    """A fresh Postgres database's URL, dropped after the test."""
    from urllib.parse import urlsplit, urlunsplit

    from tests.stores.postgres.support import DSN, fresh_database

    async with fresh_database("steerable_oa_") as name:
        parts = urlsplit(DSN)
        yield urlunsplit((parts.scheme, parts.netloc, f"/{name}", "", ""))
