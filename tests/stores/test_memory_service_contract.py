"""The memory store keeps the whole service store contract."""

from __future__ import annotations

from contextlib import nullcontext

import pytest

from steerable.stores.memory import MemoryStore
from steerable.testing import OpenStore, ServiceContract


@pytest.mark.store_abilities("rewritable", "forkable", "journaled", "repairable")
class TestMemoryServiceStore(ServiceContract):
    @pytest.fixture
    def store_factory(self) -> OpenStore:
        store = MemoryStore()  # every "new store object" of a case is this one
        return lambda: nullcontext(store)
