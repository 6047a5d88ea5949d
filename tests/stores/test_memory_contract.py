"""The memory store keeps the whole store contract (in one process, for its lifetime)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, nullcontext

import pytest

from steerable.store import Store
from steerable.stores.memory import MemoryStore
from steerable.testing import OpenStore, StoreContract


class _Serial:
    """The memory store's verbs never await: the event loop serialises them already."""

    async def until_waiting(self, count: int) -> None:
        pass


@pytest.mark.store_abilities("lockable")
class TestMemoryStore(StoreContract):
    @pytest.fixture
    def store_factory(self) -> OpenStore:
        store = MemoryStore()  # every "new store object" of a case is this one
        return lambda: nullcontext(store)

    @asynccontextmanager
    async def hold_steer(self, store: Store, session: str) -> AsyncIterator[_Serial]:
        yield _Serial()
