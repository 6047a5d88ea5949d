"""The Postgres store's tables, as ordered migrations the application applies, never the store.

Every table is prefixed ``steerable_`` so it can share a schema with the application's own.
A message body is :func:`steerable.codec.encode`'s JSON *text* in a ``text`` column: jsonb
would rewrite it (key order, duplicate keys, spacing) and a tool call's raw arguments must
come back byte for byte.

A steer is kept as the body of the steered user message it becomes, so a take copies it
into the transcript inside SQL without a trip back to Python. The ``text`` of a waiting
steer is read back from that body, which also lets a steer hold NUL (``codec`` escapes it;
a ``text`` column could not).

``steerable_schema`` records the version of every step applied; :func:`._migrate.migrate`
keeps it, and the store reads it only in ``schema_version``/``check_schema``. A step is a
list of statements run in one transaction with its version row (Postgres DDL is
transactional), so a step is applied whole or not at all. Its statements say ``IF NOT
EXISTS`` where they can, so a step also adopts tables made by hand from the same DDL.
To change the schema, append a step; never edit one that has shipped.
"""

from __future__ import annotations

from typing import Final

from steerable.stores.migrations import Migration, validated

MIGRATIONS: Final = validated(
    [
        Migration(
            1,
            "the messages and steers tables",
            (
                """CREATE TABLE IF NOT EXISTS steerable_messages (
    session  text   NOT NULL,
    position bigint NOT NULL,
    id       text   NOT NULL,
    body     text   NOT NULL,
    CONSTRAINT steerable_messages_position PRIMARY KEY (session, position),
    CONSTRAINT steerable_messages_id UNIQUE (session, id)
)""",
                """CREATE TABLE IF NOT EXISTS steerable_steers (
    seq     bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session text    NOT NULL,
    id      text    NOT NULL,
    body    text    NOT NULL,
    taken   boolean NOT NULL DEFAULT false,
    CONSTRAINT steerable_steers_id UNIQUE (session, id)
)""",
                """CREATE INDEX IF NOT EXISTS steerable_steers_waiting
    ON steerable_steers (session, seq) WHERE NOT taken""",
            ),
        ),
    ]
)
"""The schema of the Postgres store: apply it with :func:`steerable.stores.postgres.migrate`."""

SCHEMA_VERSION: Final = len(MIGRATIONS)
"""The schema version this steerable reads and writes: the last of :data:`MIGRATIONS`."""
