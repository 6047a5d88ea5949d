"""Test helpers shipped with steerable: the store conformance suite, as a pytest plugin.

A store's whole test is a class::

    import pytest
    from steerable.testing import OpenStore, StoreContract

    @pytest.mark.store_abilities("persistent", "processes")
    class TestMyStore(StoreContract):
        @pytest.fixture
        def store_factory(self) -> OpenStore:
            return functools.partial(open_my_store, "test-db")

``store_factory`` returns a callable giving an async context manager that yields a store;
every call reaches the same backing data. Each case of the contract is its own test of the
class; a case needing an ability the store does not declare is skipped with the reason.
See ``docs/stores.md`` for the contract, the abilities and their hooks.
"""

import sys

import pytest

if "steerable.testing.cases" not in sys.modules:  # the plugin registers it, unless disabled
    pytest.register_assert_rewrite(
        "steerable.testing.cases",
        "steerable.testing.rewrite_cases",
        "steerable.testing.service_cases",
        "steerable.testing.known_cases",
        "steerable.testing.end_cases",
        "steerable.testing.first_cases",
    )

from steerable.testing.abilities import (
    ABILITIES,
    HOOKS,
    Corruptible,
    CorruptibleSteers,
    Hold,
    Line,
    Lockable,
    OpenStore,
    Outage,
    needs,
)
from steerable.testing.cases import CASES
from steerable.testing.contract import ServiceContract, StoreContract
from steerable.testing.service_cases import SERVICE_CASES

__all__ = [
    "ABILITIES",
    "CASES",
    "HOOKS",
    "Corruptible",
    "CorruptibleSteers",
    "Hold",
    "Line",
    "Lockable",
    "OpenStore",
    "Outage",
    "SERVICE_CASES",
    "ServiceContract",
    "StoreContract",
    "needs",
]
