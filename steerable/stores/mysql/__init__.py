"""A store in MySQL 8 or MariaDB 10.6+, over the application's ``aiomysql`` pool.

::

    from steerable.stores.mysql import SCHEMA, MySQLStore

    pool = await aiomysql.create_pool(host=..., user=..., db=...)  # charset utf8mb4: default
    async with pool.acquire() as conn, conn.cursor() as cur:  # once, when deploying
        for statement in SCHEMA:
            await cur.execute(statement)
    store = MySQLStore(pool)

The store runs no DDL: the application applies :data:`SCHEMA` (three tables and one
stored procedure, each statement idempotent) when it deploys, and :data:`SCHEMA_VERSION`
says which version that is. Every verb is one round trip, a save-and-take included,
whatever the pool's autocommit setting. The pool's connections must use
``charset="utf8mb4"`` (aiomysql's default); any other is refused with a clear error.

Needs the ``mysql`` extra: ``pip install 'steerable[mysql]'``.
"""

try:
    import aiomysql  # type: ignore[import-untyped]  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        "steerable.stores.mysql needs the aiomysql driver: pip install 'steerable[mysql]'"
    ) from exc

from steerable.stores.mysql._schema import SCHEMA, SCHEMA_VERSION
from steerable.stores.mysql._store import MySQLStore

__all__ = ["SCHEMA", "SCHEMA_VERSION", "MySQLStore"]
