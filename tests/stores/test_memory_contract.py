"""The memory store keeps the whole store contract (in one process)."""

from contextlib import nullcontext

from steerable.stores.memory import MemoryStore
from steerable.testing import store_contract

_store = MemoryStore()

TestMemoryStore = store_contract(lambda: nullcontext(_store), persistent=False, processes=False)
