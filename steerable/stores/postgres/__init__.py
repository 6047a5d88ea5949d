"""A store in Postgres, over the ``asyncpg`` pool the application already has.

Install it with ``pip install 'steerable[postgres]'``. The store runs no DDL: the
application applies :data:`SCHEMA` (idempotent, versioned by :data:`SCHEMA_VERSION`) the
way it applies its own migrations, then hands over its pool::

    pool = await asyncpg.create_pool(dsn)
    await pool.execute(postgres.SCHEMA)  # once per database; safe to repeat
    store = postgres.PostgresStore(pool)
    await store.check_schema()  # optional: fail at start-up rather than on the first save

Every verb is one SQL statement, so one round trip once asyncpg has prepared it on the
connection. (A default asyncpg pool also sends a reset query as each connection goes back;
a pool created with a ``reset`` that sends nothing saves that trip, when nothing else
leaves session state on its connections.) A save-and-take is one statement with
data-modifying CTEs: it appends the messages, takes the oldest waiting steers under row
locks and records them after the messages, as one implicit transaction. A save that does
not extend the stored transcript, whether it is behind or leaves a gap, raises
:class:`steerable.errors.TranscriptConflict` and changes nothing; concurrent takers in any
number of processes get each steer exactly once.

A connection that fails mid-call raises :class:`steerable.errors.StoreUnavailable`; a save
is then stored whole or not at all, so load the transcript to learn which. The statements
name the tables unqualified: a pool whose ``search_path`` starts with another Postgres
schema keeps steerable's tables there. ``statement_cache_size=0`` (PgBouncer in
transaction mode) works too, at the cost of a prepare round trip per call.
"""

from __future__ import annotations

try:
    import asyncpg  # type: ignore[import-untyped]  # noqa: F401  (fail here, with the extra named)
except ImportError as exc:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        f"steerable.stores.postgres needs asyncpg ({exc}): pip install 'steerable[postgres]'"
    ) from None

from steerable.stores.postgres._schema import SCHEMA, SCHEMA_VERSION
from steerable.stores.postgres._store import Pool, PostgresStore

__all__ = ["SCHEMA", "SCHEMA_VERSION", "Pool", "PostgresStore"]
