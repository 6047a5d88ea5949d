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

Step 2 holds the service's state (:mod:`steerable.service_store`): one row per session
(``steerable_sessions``: the lease, its ``epoch``, the running turn, the counters that
number inputs and events, how many inputs wait to be turns, and a ``version`` every write
but a renewal grows), its inputs, turns and durable events. An input keeps, like a steer,
the codec body of the steered user message it may become, so a step copies it into the
transcript inside SQL; its text is read back from that body (NUL included). A turn's
``answer`` and ``error`` are ``json.dumps`` text, so they may hold NUL too; an event's
``data`` is JSON text. ``began`` is the epoch of a turn's first claim: it orders the turns
by claim. The partial index ``steerable_sessions_work`` holds only the sessions with work
(a running turn or an input that waits to be one), so a claim of any session reads those
by lease expiry and never the sessions that went idle.

Step 3 indexes the sessions' ids in code-point order (``COLLATE "C"``: the primary key's
order is the database's collation, which may be a language's), so a listing by prefix
(``sessions``) is a range scan of that index, whatever the database's locale.
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
        Migration(
            2,
            "the service tables: sessions, inputs, turns and events",
            (
                """CREATE TABLE IF NOT EXISTS steerable_sessions (
    session text        PRIMARY KEY,
    version bigint      NOT NULL DEFAULT 0,
    epoch   bigint      NOT NULL DEFAULT 0,
    holder  text,
    expires timestamptz NOT NULL DEFAULT '-infinity',
    running text,
    inputs  bigint      NOT NULL DEFAULT 0,
    events  bigint      NOT NULL DEFAULT 0,
    queued  bigint      NOT NULL DEFAULT 0
)""",
                """CREATE INDEX IF NOT EXISTS steerable_sessions_work
    ON steerable_sessions (expires) WHERE running IS NOT NULL OR queued > 0""",
                """CREATE TABLE IF NOT EXISTS steerable_inputs (
    session text   NOT NULL,
    seq     bigint NOT NULL,
    id      text   NOT NULL,
    kind    text   NOT NULL CHECK (kind IN ('send', 'steer')),
    body    text   NOT NULL,
    offered text,
    ahead   bigint NOT NULL,
    state   text   NOT NULL DEFAULT 'waiting' CHECK (state IN ('waiting', 'taken', 'prompt')),
    turn    text,
    step    bigint,
    CONSTRAINT steerable_inputs_seq PRIMARY KEY (session, seq),
    CONSTRAINT steerable_inputs_id UNIQUE (session, id)
)""",
                """CREATE INDEX IF NOT EXISTS steerable_inputs_waiting
    ON steerable_inputs (session, seq) WHERE state = 'waiting'""",
                """CREATE TABLE IF NOT EXISTS steerable_turns (
    session        text    NOT NULL,
    id             text    NOT NULL,
    began          bigint  NOT NULL,
    start_position bigint  NOT NULL,
    cap            bigint  NOT NULL,
    state          text    NOT NULL,
    epoch          bigint  NOT NULL,
    steps          bigint  NOT NULL DEFAULT 0,
    steers_taken   bigint  NOT NULL DEFAULT 0,
    offered        bigint  NOT NULL DEFAULT 0,
    stop_requested boolean NOT NULL DEFAULT false,
    end_position   bigint,
    answer         text    NOT NULL DEFAULT '""',
    error          text,
    CONSTRAINT steerable_turns_id PRIMARY KEY (session, id)
)""",
                """CREATE INDEX IF NOT EXISTS steerable_turns_start
    ON steerable_turns (session, start_position, began)""",
                """CREATE TABLE IF NOT EXISTS steerable_events (
    session text        NOT NULL,
    id      bigint      NOT NULL,
    kind    text        NOT NULL,
    turn    text,
    data    text        NOT NULL,
    at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT steerable_events_id PRIMARY KEY (session, id)
)""",
            ),
        ),
        Migration(
            3,
            "the sessions' ids in code-point order, for listings by prefix",
            (
                """CREATE INDEX IF NOT EXISTS steerable_sessions_listing
    ON steerable_sessions (session COLLATE "C")""",
            ),
        ),
    ]
)
"""The schema of the Postgres store: apply it with :func:`steerable.stores.postgres.migrate`."""

SCHEMA_VERSION: Final = len(MIGRATIONS)
"""The schema version this steerable reads and writes: the last of :data:`MIGRATIONS`."""
