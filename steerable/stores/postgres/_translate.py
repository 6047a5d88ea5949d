"""How the Postgres store says what failed: the driver's errors as steerable's."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import asyncpg  # type: ignore[import-untyped]

from steerable.errors import StoreUnavailable, UsageError
from steerable.stores.migrations import refusal
from steerable.stores.postgres._schema import MIGRATIONS

__all__ = ["APPLY", "translated"]

APPLY = "await steerable.stores.postgres.migrate(pool)"
"""How the application applies the pending migrations; errors that ask for them quote it."""


@contextmanager
def translated(doing: str) -> Iterator[None]:
    """Turn a driver's failure into a :class:`StoreUnavailable` that says what failed."""
    try:
        yield
    except (asyncpg.UndefinedTableError, asyncpg.UndefinedColumnError) as exc:
        missing = refusal(0, MIGRATIONS, store="Postgres", apply=APPLY)
        raise StoreUnavailable(f"cannot {doing}: {exc}; {missing}") from exc
    except asyncpg.CharacterNotInRepertoireError as exc:
        # message and steer texts reach Postgres codec-escaped; an id goes in as it is, and
        # a Postgres text value cannot hold NUL: a limit of the column, like MySQL's length
        raise UsageError(f"cannot {doing}: a Postgres id cannot hold NUL ({exc})") from exc
    except (asyncpg.InterfaceError, asyncpg.exceptions.InternalClientError) as exc:
        # the pool is closed, a connection was lost; asyncpg reports a connection the server
        # terminated while it sat idle in the pool as an internal client error
        raise StoreUnavailable(f"cannot {doing}: the Postgres connection failed: {exc}") from exc
    except OSError as exc:  # refused, reset, unreachable, timed out
        raise StoreUnavailable(f"cannot {doing}: Postgres cannot be reached: {exc}") from exc
    except asyncpg.PostgresError as exc:  # shut down, terminated, out of connections, ...
        raise StoreUnavailable(
            f"cannot {doing}: Postgres refused it ({exc.sqlstate} {type(exc).__name__}): {exc}"
        ) from exc
