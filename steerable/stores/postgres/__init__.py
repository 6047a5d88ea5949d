"""A store in Postgres, over the ``asyncpg`` pool the application already has.

Install it with ``pip install 'steerable[postgres]'``. The store runs no DDL: its schema is
:data:`MIGRATIONS`, an ordered list of versioned steps, and the application applies the
ones its database lacks with :func:`migrate` where it runs its own migrations, then hands
over its pool::

    pool = await asyncpg.create_pool(dsn)
    await postgres.migrate(pool)  # applies what is missing; safe to repeat, and to race
    store = postgres.PostgresStore(pool)
    await store.check_schema()  # optional: fail at start-up rather than on the first save

:meth:`PostgresStore.check_schema` (the :class:`steerable.stores.migrations.SchemaVersioned`
ability) refuses a database older than :data:`SCHEMA_VERSION`, naming the step to apply,
and one newer, asking for a newer steerable. Each store object runs that check once, before
its first call (one query in its lifetime), and refuses every verb until it passes. A
database set up with the ``SCHEMA`` script of earlier releases is at version 1 already.

Every verb is one SQL statement (a save two when a steer waits, below), so one round trip
once asyncpg has prepared it on the connection. A default asyncpg pool adds one more as
each connection goes back: its reset query (``SELECT pg_advisory_unlock_all(); CLOSE ALL;
UNLISTEN *; RESET ALL``). A pool made with ``reset=reset_when_needed`` sends that query
only for a connection marked with :func:`mark_for_reset`, and nothing for any other::

    pool = await asyncpg.create_pool(dsn, reset=postgres.reset_when_needed)

The store marks the connections it leaves session state on (the ``LISTEN`` of ``hints()``
and of the service's live events, the advisory lock :func:`migrate` holds) and unmarks
them once it has undone that state, so over a pool of its own (``steerable serve --store
postgresql://...`` makes one so) nothing is lost. What it costs a pool the application's
own code shares: session state that code leaves without marking the connection (a session
``SET``, ``LISTEN``, a ``WITH HOLD`` cursor, a session advisory lock) reaches the
connection's next user, steerable's calls included. asyncpg itself still rolls back a
transaction left open and drops the connection's listener callbacks on every release.

A save-and-take is one statement with data-modifying CTEs: it appends the messages, takes
the oldest waiting steers under row locks and records them after the messages, as one
implicit transaction. A save runs it only when a steer waits: its first statement appends
the messages unless one does (so with ``take=0``, or no steer waiting, a save is that one
statement, which the server runs in about 60% of the time), and when one waits it writes
nothing and the save-and-take runs, a second round trip. A save that does not extend the stored
transcript, whether it is behind or leaves a gap, or that lost a race for its position
while it waited on a steer's lock, raises :class:`steerable.errors.TranscriptConflict` and
changes nothing; concurrent takers in any number of processes get each steer exactly once,
oldest first.

The two :class:`steerable.store.Rewritable` verbs are the exception: ``truncate`` and
``delete`` are each one READ COMMITTED transaction of a few statements on one connection
of the pool (so the pool must be a pool, or a connection), which locks the session's
service row (refused with :class:`steerable.errors.SessionBusy` while a turn runs) and its
last message; a save locks the message it appends after ``FOR KEY SHARE``, so it never
appends after one a cut or a delete has removed. A delete forgets the session's metadata
too; a cut keeps it.

:class:`steerable.store.Forkable`'s ``fork`` is one READ COMMITTED transaction too, four
round trips whatever the length: it makes or locks the new session's row (so forks into one
id, and an enqueue or a claim of it, queue one after the other), then one ``INSERT ...
SELECT`` copies the messages through the message in the server, refused whole when the new
session has anything (see :mod:`steerable.stores.postgres._fork`).

A connection that fails mid-call raises :class:`steerable.errors.StoreUnavailable`; a save
is then stored whole or not at all, so load the transcript to learn which. The statements
name the tables unqualified: a pool whose ``search_path`` starts with another Postgres
schema keeps steerable's tables there (:func:`migrate` creates them there too).
``statement_cache_size=0`` (PgBouncer in transaction mode) works too, at the cost of a
prepare round trip per call.

The store is also the service's (:class:`steerable.service_store.ServiceStore`), over the
same pool and the same messages table: a turn's ``step`` appends what the core's ``save``
would, fenced by its lease. Each service write is one statement too, so one round trip: it
locks the session's row, checks the lease's epoch and holder inside, and is refused whole
(:class:`steerable.errors.Fenced`) when they are stale. An ``end_turn`` given the turn's
``last`` messages saves them and ends the turn in that one statement, refused whole
together, so a turn nobody steered ends in one trip where a final ``step`` then an
``end_turn`` were two. Each verb of the queue is one statement too: an ``enqueue`` with its
conditions (``if_idle``, ``expected_turn``, ``max_waiting``, refused whole inside the
statement), ``cancel``, the ``stopping`` poll, the bounded and paged views (``status``,
``inputs``, ``turns``) and ``set_metadata``. The exceptions: a session's first
input makes its row (three trips), and a statement that waited on the row's lock while
another write committed runs again on a fresh snapshot. Leases expire on the server's clock,
and the times the views give (an input's, a turn's start and end, a message's) are its too.
The store notifies (:class:`steerable.service_store.Notifying`): ``hints()`` listens on
channel ``steerable`` (payload JSON ``{"kind", "session"}``) on one connection it takes
from the pool for the context's lifetime; the writes that make work claimable and ``stop``
notify inside their statement, so a hint is sent when the write commits. Under PgBouncer in
transaction mode ``LISTEN`` does not work: use hints only over a direct pool.
"""

from __future__ import annotations

from steerable._extras import missing_extra

try:
    import asyncpg  # type: ignore[import-untyped]  # noqa: F401  (fail here, with the extra named)
except ImportError as exc:  # pragma: no cover - exercised in a subprocess by the tests
    raise missing_extra("steerable.stores.postgres", "postgres", "asyncpg", exc) from None

from steerable.stores.postgres._migrate import migrate
from steerable.stores.postgres._reset import mark_for_reset, reset_when_needed
from steerable.stores.postgres._schema import MIGRATIONS, SCHEMA_VERSION
from steerable.stores.postgres._store import Pool, PostgresStore

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "Pool",
    "PostgresStore",
    "mark_for_reset",
    "migrate",
    "reset_when_needed",
]
