"""The stores the OpenAI Agents tests that touch a store run on: SQLite and Postgres.

The fixtures are the Pydantic AI tests' own (``store_url``, ``store``), reused rather than
copied: a SQLite file, or a fresh Postgres database (skipped, or failed, without a server).
"""

from tests.integrations.pydantic_ai.conftest import store, store_url

__all__ = ["store", "store_url"]
