"""steerable's pytest plugin: the markers of the store conformance suite, and nothing else.

pytest loads it in every project where steerable is installed, so it is a top-level
module that imports nothing of steerable (importing the ``steerable`` package costs a
quarter of a second): it registers two markers and marks the suite's case module for
assertion rewriting before anything imports it. No case runs unless a test class derives
from :class:`steerable.testing.StoreContract`.
"""

from __future__ import annotations

import pytest

# before steerable.testing.cases is imported anywhere: its plain asserts then show diffs
pytest.register_assert_rewrite(
    "steerable.testing.cases",
    "steerable.testing.end_cases",
    "steerable.testing.first_cases",
    "steerable.testing.fork_cases",
    "steerable.testing.journal_cases",
    "steerable.testing.known_cases",
    "steerable.testing.lease_cases",
    "steerable.testing.queue_cases",
    "steerable.testing.rewrite_cases",
    "steerable.testing.service_cases",
)


def pytest_configure(config: pytest.Config) -> None:
    """Register the suite's markers (so ``--strict-markers`` knows them)."""
    config.addinivalue_line(
        "markers",
        "store_abilities(*names): the abilities a store declares to the steerable"
        " conformance suite (persistent, processes, corruptible, outage, lockable, rewritable,"
        " forkable, journaled, repairable)",
    )
    config.addinivalue_line(
        "markers",
        "store_needs(*names): the abilities a steerable conformance case needs; skipped"
        " on a store that does not declare them",
    )
