"""A store in MySQL 8 or MariaDB 10.6+, over the application's ``aiomysql`` pool.

::

    from steerable.stores.mysql import MySQLStore, migrate

    pool = await aiomysql.create_pool(host=..., user=..., db=...)  # charset utf8mb4: default
    await migrate(pool)  # when deploying: applies what is missing; safe to repeat and race
    store = MySQLStore(pool)
    await store.check_schema()  # optional: fail at start-up rather than on the first save

The store runs no DDL: its schema is :data:`MIGRATIONS`, an ordered list of versioned steps
(the core's three tables and save procedure, then the service's four tables and step
procedure, then the metadata, times and usage columns and the keys of the bounded views
and the stop poll, then the tool journal's table, then an input's trace column, then the
transcript's mark on the service row, then the save and step procedures' second
versions, which answer their steers only when they took some), which the application
applies with :func:`migrate` where it runs its own migrations; :data:`SCHEMA_VERSION` is
the version this steerable needs. :meth:`MySQLStore.check_schema` (the
:class:`steerable.stores.migrations.SchemaVersioned` ability) refuses an older database
naming the step to apply, and a newer one asking for a newer steerable; each store object
runs that check once, before its first call (one statement in its lifetime), and refuses
every verb until it passes. A database set up
from the ``SCHEMA`` statements of earlier releases records no version: ``migrate`` runs
step 1 on it again (idempotent) and records it.

Every core verb is one round trip, a save-and-take included, whatever the pool's
autocommit setting. The store is also a :class:`steerable.service_store.ServiceStore`:
each service write is one transaction under the session's row lock, its step one round
trip like the core's save; an end that carries the turn's last save (``end_turn(last=...)``)
appends it in the end's transaction, one statement more than an end alone (the core's lock;
an insert that checks the length stands in for the end's read of it): as many statements
as a final step and an end apart, in one call and one transaction instead of two; leases
run on the server's clock. A claim reads and decodes
only the messages the claimer does not hold under the transcript's mark (the service row's
``mark``, which ``truncate``, ``delete``, ``replace`` and a fork into the session set anew).
The :class:`steerable.store.Rewritable` verbs (``truncate``, ``delete``) are each one
transaction under the session's service row lock and then the core's (the one every save
takes), refused with :class:`steerable.errors.SessionBusy` while a turn runs. The
:class:`steerable.store.Forkable` verb (``fork``) is one transaction under the new
session's two locks, taken in that order, whose copy of the messages is one
``INSERT ... SELECT`` the server runs: the same eight statements for one message or a
thousand. The :class:`steerable.store.Repairable` verb (``replace``) is one transaction
under the same two locks as ``truncate``, not refused while a turn runs: it compares the
tail's ids and swaps it, or changes nothing. The :class:`steerable.store.Journaling` verbs
(``begin_calls``, ``end_call``) are each one transaction under the session's core lock
alone, so of many begins of one call key exactly one is told it is new; they are not
fenced by the service's lease. MySQL has no notifications, so the store gives no hints (it is not
:class:`~steerable.service_store.Notifying`): the service polls, for stops with
``stopping(holder)``, one statement over a key of the holder's own sessions. The pool's
connections must use ``charset="utf8mb4"`` (aiomysql's default); any other is refused with
a clear error.

Needs the ``mysql`` extra: ``pip install 'steerable[mysql]'``.
"""

from steerable._extras import missing_extra

try:
    import aiomysql  # type: ignore[import-untyped]  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised in a subprocess by the tests
    raise missing_extra("steerable.stores.mysql", "mysql", "aiomysql", exc) from None

from steerable.stores.mysql._migrate import migrate
from steerable.stores.mysql._schema import MIGRATIONS, SCHEMA_VERSION
from steerable.stores.mysql._store import MySQLStore, Pool

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "MySQLStore", "Pool", "migrate"]
