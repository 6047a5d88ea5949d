"""Versioned schema steps for the server stores, and the ability to check what a database has.

Postgres, MySQL and MongoDB each export ``MIGRATIONS``: an ordered list of
:class:`Migration` steps, version 1, 2, 3, ... A database records each step it has applied;
its *schema version* is the highest. The stores run none of it: the application applies the
pending steps with the backend's ``migrate()`` where it runs its own migrations (a deploy
job, a start-up hook, next the ``steerable migrate`` command), because a library that
migrates a shared database on its own will one day do it during an incident.

A store that can say what its database holds implements :class:`SchemaVersioned`;
:func:`check_schema` checks any store, doing nothing for one without a schema (memory,
SQLite, which creates and upgrades its own file). A database older than this steerable is
refused naming the step to run; a newer one asks for a newer steerable. Neither is read or
written as if it were the layout this steerable knows.

Adding a step is appending one :class:`Migration` with the next version to a backend's list;
``migrate()`` and the check pick it up. A step must be safe to run again after a crash
half way through it (each backend's ``migrate`` says what it guarantees).

This module imports no driver.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar, runtime_checkable

from steerable.errors import StoreUnavailable, UsageError

__all__ = [
    "Migration",
    "SchemaVersioned",
    "check_schema",
    "pending",
    "refusal",
    "require",
    "validated",
]

_StepT = TypeVar("_StepT")


@dataclass(frozen=True, slots=True)
class Migration(Generic[_StepT]):
    """One versioned step of a store's schema.

    ``steps`` are the backend's own: SQL statements, run in order, for Postgres and MySQL;
    coroutine functions over the database for MongoDB. ``summary`` says in a line what the
    step does; errors that ask for the step quote it.
    """

    version: int
    summary: str
    steps: tuple[_StepT, ...]


@runtime_checkable
class SchemaVersioned(Protocol):
    """A store whose database is set up by ordered :class:`Migration` steps it never runs."""

    async def schema_version(self) -> int:
        """The highest migration the database has applied; 0 when it has none."""
        ...

    async def check_schema(self) -> None:
        """Raise :class:`StoreUnavailable` unless the database has exactly this schema.

        Older: the message names the next step and how to apply it. Newer: it asks for a
        newer steerable.
        """
        ...


async def check_schema(store: object) -> None:
    """Check ``store``'s database schema if it has one (:class:`SchemaVersioned`).

    Call it at start-up to fail there rather than on the first save.
    """
    if isinstance(store, SchemaVersioned):
        await store.check_schema()


def validated(migrations: Sequence[Migration[_StepT]]) -> tuple[Migration[_StepT], ...]:
    """``migrations`` as a tuple, if their versions are 1, 2, 3, ... in order."""
    versions = [m.version for m in migrations]
    if versions != list(range(1, len(versions) + 1)):
        raise UsageError(f"migrations are numbered 1, 2, 3, ... in order, not {versions}")
    return tuple(migrations)


def pending(migrations: Sequence[Migration[_StepT]], version: int) -> list[Migration[_StepT]]:
    """The steps a database at schema ``version`` has still to apply, in order."""
    return [m for m in migrations if m.version > version]


def refusal(
    version: int, migrations: Sequence[Migration[_StepT]], *, store: str, apply: str
) -> StoreUnavailable | None:
    """The error for a database at schema ``version``, or None if it is the latest.

    ``store`` names the backend in the message; ``apply`` says how to run the pending steps
    (``"await steerable.stores.postgres.migrate(pool)"``).
    """
    latest = len(migrations)
    if version > latest:
        return StoreUnavailable(
            f"the {store} database has steerable schema version {version}; this steerable"
            f" knows versions up to {latest}: upgrade steerable"
        )
    if version < latest:
        step = migrations[version]
        has = f"version {version}" if version else "no steerable schema"
        return StoreUnavailable(
            f"the {store} database has {has}; this steerable needs version {latest}: apply"
            f" migration step {step.version} ({step.summary})"
            + (f" and {latest - step.version} after it" if latest > step.version else "")
            + f" with `{apply}` (the store runs no migrations)"
        )
    return None


def require(
    version: int, migrations: Sequence[Migration[_StepT]], *, store: str, apply: str
) -> None:
    """Raise :func:`refusal`'s error for a database at schema ``version``, if there is one.

    The body of every backend's ``check_schema``, and of the check each store object runs
    once, before its first call.
    """
    error = refusal(version, migrations, store=store, apply=apply)
    if error is not None:
        raise error
