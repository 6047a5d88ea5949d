"""Test helpers shipped with steerable: the store conformance suite.

A store author's whole test is one call::

    from steerable.testing import store_contract

    TestMyStore = store_contract(open_my_store)

``open_my_store`` is a callable that returns an async context manager yielding a store;
each call must reach the same backing data (the same file, database or schema), so the
suite can check that a new store object sees what an old one stored. Each case of the
contract becomes its own pytest test of the returned class.
"""

from steerable.testing.conformance import CASES, OpenStore, store_contract

__all__ = ["CASES", "OpenStore", "store_contract"]
