"""What a store may declare it can do beyond the contract's core, and the hooks each needs.

A store declares abilities on its test class with ``@pytest.mark.store_abilities(...)``;
a case that needs one it lacks is skipped, with the reason. Where an ability needs the
test to reach behind the store (damage a row, cut the line to the server, hold a lock),
the test class defines the hook :data:`HOOKS` names, typed by the protocols below.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Protocol, TypeAlias, TypeVar, runtime_checkable

from steerable.errors import UsageError
from steerable.store import Store

__all__ = [
    "ABILITIES",
    "HOOKS",
    "Corruptible",
    "CorruptibleSteers",
    "Hold",
    "Line",
    "Lockable",
    "OpenStore",
    "Outage",
    "needs",
]

OpenStore: TypeAlias = Callable[[], AbstractAsyncContextManager[Store]]
"""A store factory: each call gives an async context manager yielding a new store object.

Every call reaches the same backing data (one file, one database), so a case can check
that a second store object sees what the first one stored.
"""

ABILITIES: dict[str, str] = {
    "persistent": "a new store object sees what an earlier one stored",
    "processes": "store objects in other processes share the data (store_factory pickles)",
    "corruptible": "the test can damage a stored row (hook corrupt_message)",
    "outage": "the test can cut the store off its server and bring it back (hook outage)",
    "lockable": "the test can hold the lock a save waits for (hook hold_steer)",
    "rewritable": "truncate and delete (steerable.store.Rewritable)",
    "forkable": "fork a session through a message (steerable.store.Forkable)",
    "journaled": "keep a tool journal (steerable.store.Journaling)",
    "repairable": "swap a transcript's tail, compared first (steerable.store.Repairable)",
}
"""What a store may declare with ``@pytest.mark.store_abilities(...)``, and what each means."""

HOOKS: dict[str, tuple[str, ...]] = {
    "corruptible": ("corrupt_message",),
    "outage": ("outage",),
    "lockable": ("hold_steer",),
}
"""The methods a test class defines for each ability it declares."""

_C = TypeVar("_C", bound=Callable[..., object])


def needs(*abilities: str) -> Callable[[_C], _C]:
    """Mark a case as needing ``abilities``; it is skipped on a store that lacks one."""
    unknown = set(abilities) - ABILITIES.keys()
    if unknown:
        raise UsageError(
            f"unknown abilities {sorted(unknown)}; the suite knows {sorted(ABILITIES)}"
        )

    def mark(case: _C) -> _C:
        case.store_needs = abilities  # type: ignore[attr-defined]
        return case

    return mark


@runtime_checkable
class Corruptible(Protocol):
    """The hook of ``corruptible``."""

    async def corrupt_message(self, store: Store, session: str, position: int) -> None:
        """Damage the stored row of the message at ``position`` so it cannot be decoded."""
        ...


@runtime_checkable
class CorruptibleSteers(Protocol):
    """An optional hook of ``corruptible``, for a store that keeps a steer encoded."""

    async def corrupt_steer(self, store: Store, session: str, steer_id: str) -> None:
        """Damage the stored row of the waiting steer ``steer_id``."""
        ...


class Line(Protocol):
    """A way to the server that a test can cut; see :class:`Outage`."""

    @property
    def store(self) -> Store:
        """A store object whose connections run over this line."""
        ...

    async def cut(self) -> None:
        """Drop every connection and refuse new ones: the server is gone, for the store."""
        ...

    async def restore(self) -> None:
        """Let connections through again, to the same server and data."""
        ...


@runtime_checkable
class Outage(Protocol):
    """The hook of ``outage``."""

    def outage(self) -> AbstractAsyncContextManager[Line]:
        """A line to the server with a store object over it, torn down at the end."""
        ...


class Hold(Protocol):
    """A lock a test holds on a session; see :class:`Lockable`."""

    async def until_waiting(self, count: int) -> None:
        """Return once ``count`` store calls wait for the lock (a bounded poll)."""
        ...


@runtime_checkable
class Lockable(Protocol):
    """The hook of ``lockable``."""

    def hold_steer(self, store: Store, session: str) -> AbstractAsyncContextManager[Hold]:
        """Hold what a save-and-take of ``session`` waits for while the block runs.

        That is the row of the oldest waiting steer, or the store's write lock where it
        has one lock for a session or a file. Leaving the block releases it.
        """
        ...
