"""The Postgres store's tables: DDL the application runs, never the store.

Every table is prefixed ``steerable_`` so it can share a schema with the application's own.
A message body is :func:`steerable.codec.encode`'s JSON *text* in a ``text`` column: jsonb
would rewrite it (key order, duplicate keys, spacing) and a tool call's raw arguments must
come back byte for byte.

A steer is kept as the body of the steered user message it becomes, so a take copies it
into the transcript inside SQL without a trip back to Python. The ``text`` of a waiting
steer is read back from that body, which also lets a steer hold NUL (``codec`` escapes it;
a ``text`` column could not).

The script is idempotent and takes an advisory lock first: several replicas starting at
once may all run it. It runs as one implicit transaction when sent as a single simple
query (``await pool.execute(SCHEMA)``), so it applies whole or not at all.
"""

from __future__ import annotations

SCHEMA_VERSION = 1
"""The version of :data:`SCHEMA`; recorded in ``steerable_schema`` when the script runs."""

SCHEMA = f"""
SELECT pg_advisory_xact_lock(7310582279216590951);

CREATE TABLE IF NOT EXISTS steerable_schema (
    version    integer     PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS steerable_messages (
    session  text   NOT NULL,
    position bigint NOT NULL,
    id       text   NOT NULL,
    body     text   NOT NULL,
    CONSTRAINT steerable_messages_position PRIMARY KEY (session, position),
    CONSTRAINT steerable_messages_id UNIQUE (session, id)
);

CREATE TABLE IF NOT EXISTS steerable_steers (
    seq     bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session text    NOT NULL,
    id      text    NOT NULL,
    body    text    NOT NULL,
    taken   boolean NOT NULL DEFAULT false,
    CONSTRAINT steerable_steers_id UNIQUE (session, id)
);

CREATE INDEX IF NOT EXISTS steerable_steers_waiting
    ON steerable_steers (session, seq) WHERE NOT taken;

INSERT INTO steerable_schema (version) VALUES ({SCHEMA_VERSION}) ON CONFLICT DO NOTHING;
"""
"""The DDL of the Postgres store, version :data:`SCHEMA_VERSION`.

Run it once per database (it is safe to run again): ``await pool.execute(SCHEMA)``.
"""
