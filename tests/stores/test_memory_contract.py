"""The memory store keeps the whole store contract (in one process, for its lifetime); the
suite refuses an ability it does not know."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, nullcontext

import pytest

from steerable.errors import UsageError
from steerable.store import Store
from steerable.stores.memory import MemoryStore
from steerable.testing import OpenStore, StoreContract
from steerable.testing.abilities import needs


class _Serial:
    """The memory store's verbs never await: the event loop serialises them already."""

    async def until_waiting(self, count: int) -> None:
        pass


@pytest.mark.store_abilities("lockable", "rewritable", "forkable", "journaled", "repairable")
class TestMemoryStore(StoreContract):
    @pytest.fixture
    def store_factory(self) -> OpenStore:
        store = MemoryStore()  # every "new store object" of a case is this one
        return lambda: nullcontext(store)

    @asynccontextmanager
    async def hold_steer(self, store: Store, session: str) -> AsyncIterator[_Serial]:
        yield _Serial()


def test_a_case_needing_an_ability_the_suite_does_not_know_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="unknown abilities"):
        needs("teleporting")
