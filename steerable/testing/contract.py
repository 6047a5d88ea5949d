"""The pytest side of the conformance suite: the class a store's test derives from.

A store's whole test is a subclass of :class:`StoreContract` that declares the store's
abilities with a marker and gives a ``store_factory`` fixture::

    @pytest.mark.store_abilities("persistent", "processes")
    class TestMyStore(StoreContract):
        @pytest.fixture
        def store_factory(self) -> OpenStore:
            return functools.partial(open_my_store, "test-db")

Every case of :mod:`steerable.testing.cases` becomes its own test of the class. The cases
are coroutines and the suite runs each itself, in an event loop of its own
(:class:`asyncio.Runner`), whatever async plugin the project uses (pytest-asyncio, anyio
or none): the ``store`` fixture enters ``store_factory()`` in that same loop, so a driver
pool bound to the loop that made it is made where it is used.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Coroutine, Iterator
from contextlib import AbstractAsyncContextManager
from typing import Any, ClassVar, TypeAlias, TypeVar

import pytest

from steerable.errors import UsageError
from steerable.store import Store
from steerable.testing import (
    cases,
    end_cases,
    first_cases,
    fork_cases,
    journal_cases,
    known_cases,
    lease_cases,
    queue_cases,
    rewrite_cases,
    service_cases,
)
from steerable.testing.abilities import ABILITIES, HOOKS, OpenStore

__all__ = ["ServiceContract", "StoreContract"]

_Case: TypeAlias = Callable[..., Coroutine[Any, Any, None]]


def _test_for(case: _Case) -> Callable[..., None]:
    """A synchronous pytest test that runs ``case`` in the test's own event loop.

    The test asks pytest for the fixtures the case names (``store``, ``store_factory``);
    a case parameter named ``hooks`` gets the test class instance, whose methods are the
    store's hooks.
    """
    parameters = list(inspect.signature(case).parameters)
    fixtures = [name for name in parameters if name != "hooks"]
    wants_hooks = "hooks" in parameters

    def test(self: _Contract, case_runner: asyncio.Runner, **values: Any) -> None:
        if wants_hooks:
            values["hooks"] = self
        case_runner.run(case(**values))

    test.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD)
            for name in ("self", "case_runner", *fixtures)
        ]
    )
    test.__name__ = test.__qualname__ = f"test_{case.__name__}"
    test.__doc__ = case.__doc__
    needs: tuple[str, ...] = getattr(case, "store_needs", ())
    return pytest.mark.store_needs(*needs)(test) if needs else test


def _abilities(node: pytest.Item) -> frozenset[str]:
    marker = node.get_closest_marker("store_abilities")
    declared = frozenset(marker.args if marker else ())
    unknown = declared - ABILITIES.keys()
    if unknown:
        raise UsageError(
            f"{node.nodeid}: unknown store abilities {sorted(unknown)};"
            f" the suite knows {sorted(ABILITIES)}"
        )
    return declared


class _Cases:
    """One test per case of the suite, mixed into :class:`StoreContract`."""


class _ServiceCases:
    """One test per case of the service suite, mixed into :class:`ServiceContract`."""


for _case in [*cases.CASES, *rewrite_cases.CASES, *fork_cases.CASES, *journal_cases.CASES]:
    setattr(_Cases, f"test_{_case.__name__}", _test_for(_case))
assert queue_cases.CLOCK  # imported for its cases, which join SERVICE_CASES
assert lease_cases.MANY  # the same
for _case in [
    *service_cases.SERVICE_CASES,
    *rewrite_cases.SERVICE_CASES,
    *fork_cases.SERVICE_CASES,
    *known_cases.SERVICE_CASES,
    *end_cases.SERVICE_CASES,
    *first_cases.SERVICE_CASES,
]:
    setattr(_ServiceCases, f"test_{_case.__name__}", _test_for(_case))


class _Contract:
    """The fixtures both contracts share: the case's loop, the store, the class lifespan.

    Give it a ``store_factory`` fixture (an :data:`~steerable.testing.OpenStore`) and
    declare its abilities with ``@pytest.mark.store_abilities(...)`` (the names and what
    they mean: :data:`~steerable.testing.ABILITIES`); for each ability define the hooks
    :data:`~steerable.testing.HOOKS` names. ``lifespan``, if set, is an async context
    manager factory entered once for the class: set up a server database there and tear
    it down after. It runs in a loop of its own, so it makes databases, not connections
    the cases use; what it yields is the ``store_lifespan`` fixture.
    """

    lifespan: ClassVar[Callable[[], AbstractAsyncContextManager[Any]] | None] = None

    @pytest.fixture(scope="class")
    @classmethod
    def store_lifespan(cls) -> Iterator[Any]:
        """What the class's ``lifespan`` yields, entered once for the class (or None)."""
        lifespan = cls.lifespan
        if lifespan is None:
            yield None
            return
        with asyncio.Runner() as runner:
            yield from _entered(runner, lifespan())

    @pytest.fixture
    def case_runner(self, request: pytest.FixtureRequest) -> Iterator[asyncio.Runner]:
        """The case's own event loop; a case whose ability is not declared skips first."""
        declared = _abilities(request.node)
        marker = request.node.get_closest_marker("store_needs")
        for need in marker.args if marker else ():
            if need not in declared:
                pytest.skip(f"the store does not declare {need!r}: {ABILITIES[need]}")
            for hook in HOOKS.get(need, ()):
                if not callable(getattr(self, hook, None)):
                    raise UsageError(f"{type(self).__name__} declares {need!r} but has no {hook}()")
        with asyncio.Runner() as runner:
            yield runner

    @pytest.fixture
    def store(self, case_runner: asyncio.Runner, store_factory: OpenStore) -> Iterator[Store]:
        """A store object from ``store_factory``, opened in the case's own loop."""
        yield from _entered(case_runner, store_factory())


class StoreContract(_Cases, _Contract):
    """Derive a ``Test...`` class from this to run the whole store contract on a store.

    See :class:`_Contract` for the fixture it needs and the abilities it reads.
    """


class ServiceContract(_ServiceCases, _Contract):
    """Derive a ``Test...`` class from this to run the service store contract on a store.

    The store the factory opens implements :class:`steerable.Store` and
    :class:`steerable.service_store.ServiceStore`; the fixture and abilities are those of
    :class:`StoreContract` (a backend's two test classes can share one ``store_factory``).
    """


_T = TypeVar("_T")


def _entered(runner: asyncio.Runner, manager: AbstractAsyncContextManager[_T]) -> Iterator[_T]:
    """What ``manager`` yields, entered and (after the consumer is done) left in ``runner``."""
    value = runner.run(manager.__aenter__())
    try:
        yield value
    finally:
        runner.run(manager.__aexit__(None, None, None))
