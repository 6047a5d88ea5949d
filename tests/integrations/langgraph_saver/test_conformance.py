"""LangGraph's own conformance suite (``langgraph-checkpoint-conformance``), unmodified.

Its ``validate`` runs one capability's cases against a saver its factory builds; here each
(store, capability) pair is one pytest test, on all five stores (memory, SQLite, Postgres,
MySQL/MariaDB, MongoDB on SecantusDB: ``stores.py``). The base capabilities (put, put_writes,
get_tuple, list, delete_thread) must pass on every store; copy_thread and prune are
implemented and must pass too; delete_for_runs needs a listing of threads across the store,
which steerable's Store does not give, so the saver does not provide it and the suite
reports it not detected.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncGenerator
from pathlib import Path

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import BASE_CAPABILITIES, Capability

from steerable.integrations.langgraph._saver import SteerableSaver
from tests.integrations.langgraph_saver.stores import KINDS, open_store

IMPLEMENTED = {c.value for c in Capability} - {Capability.DELETE_FOR_RUNS.value}


@pytest.mark.parametrize("capability", sorted(c.value for c in Capability))
@pytest.mark.parametrize("kind", KINDS)
async def test_the_conformance_suite(
    kind: str, capability: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """One capability of LangGraph's suite on one store: passed, or (delete_for_runs) absent."""
    uri = request.getfixturevalue("saver_mongo_uri") if kind == "mongodb" else None
    async with open_store(kind, tmp_path, uri) as store:

        @checkpointer_test(name=f"SteerableSaver on {kind}")
        async def factory() -> AsyncGenerator[SteerableSaver, None]:
            # the suite reuses thread ids ("thread-0") across capabilities: a prefix each
            yield SteerableSaver(store, prefix=f"conformance-{secrets.token_hex(4)}:")

        report = await validate(factory, capabilities={capability})
    result = report.results[capability]
    if capability in IMPLEMENTED:
        assert result.detected, f"{capability} not detected"
        assert result.passed, result.failures
        assert result.tests_failed == 0 and result.tests_passed > 0
    else:
        assert not result.detected and result.passed is None
        assert Capability(capability) not in BASE_CAPABILITIES
