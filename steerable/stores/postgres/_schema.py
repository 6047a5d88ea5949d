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

Step 4 is the contract of issue 18: an input may be ``cancelled`` (the state's check is
replaced, now named ``steerable_inputs_state``); an input and a session keep their metadata
as JSON text (NULL: none); inputs and messages record the server's ``now()`` they were
written at (a column default, so every insert path fills it, the core's save included); a
turn records its prompt's ``seq`` (indexed: ``turns`` pages by it), its first claim's and its
end's times and its usage (JSON text). Rows of an older version keep their data: an input's
time and a turn's are read back from the events written with them; a message written
before the step has no time (NULL). The partial index ``steerable_sessions_holder`` serves
``stopping``, the poll of a holder's sessions.

Step 5 is the tool journal of issue 19 (:class:`steerable.store.Journaling`):
``steerable_journal`` has one row per (session, call key), begun when it is made; its
``result`` is :func:`steerable.journal.encode_result`'s text (NULL: started, not ended), in a
``text`` column for the same reason as a body. ``started_at`` and ``ended_at`` are the
server's times, for an operator reading the table; the store reads neither. The step only
adds a table: a database at version 4 keeps every row as it was.

Step 6 is an input's trace context of issue 21 (:attr:`steerable.service_store.Input.trace`):
the W3C carrier of the span that sent it, JSON text in a column of its own beside the user's
``metadata``, NULL for ``{}`` as metadata is. The step only adds the column: the inputs of
before read ``{}``.
"""

from __future__ import annotations

from typing import Final

from steerable.stores.migrations import Migration, validated

NEW_MARK: Final = "md5(random()::text || clock_timestamp()::text)"
"""A new transcript mark (see :class:`steerable.service_store.Claim`): the default of a
session's row, and what every write that cuts, changes or forks into a transcript sets."""

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
        Migration(
            4,
            "cancelled inputs, metadata, the times of inputs, turns and messages, turn usage",
            (
                # step 2's check, named by Postgres, and this step's own (adopted tables)
                """ALTER TABLE steerable_inputs
    DROP CONSTRAINT IF EXISTS steerable_inputs_state_check,
    DROP CONSTRAINT IF EXISTS steerable_inputs_state""",
                """ALTER TABLE steerable_inputs ADD CONSTRAINT steerable_inputs_state
    CHECK (state IN ('waiting', 'taken', 'prompt', 'cancelled'))""",
                """ALTER TABLE steerable_inputs ADD COLUMN IF NOT EXISTS metadata text,
    ADD COLUMN IF NOT EXISTS at timestamptz""",
                # an input's time is its `input` event's (one statement wrote both)
                """UPDATE steerable_inputs i SET at = e.at FROM steerable_events e
WHERE i.at IS NULL AND e.session = i.session AND e.kind = 'input'
    AND e.data::json ->> 'id' = i.id""",
                "ALTER TABLE steerable_inputs ALTER COLUMN at SET DEFAULT now()",
                """ALTER TABLE steerable_turns ADD COLUMN IF NOT EXISTS seq bigint,
    ADD COLUMN IF NOT EXISTS started_at timestamptz,
    ADD COLUMN IF NOT EXISTS ended_at timestamptz,
    ADD COLUMN IF NOT EXISTS usage text""",
                """UPDATE steerable_turns t SET seq = i.seq FROM steerable_inputs i
WHERE t.seq IS NULL AND i.session = t.session AND i.id = t.id""",
                # the first `turn_started` is the first claim; a turn ends once
                """UPDATE steerable_turns t SET started_at = e.started, ended_at = e.ended
FROM (
    SELECT session, turn, min(at) FILTER (WHERE kind = 'turn_started') AS started,
        min(at) FILTER (WHERE kind = 'turn_ended') AS ended
    FROM steerable_events WHERE kind IN ('turn_started', 'turn_ended') GROUP BY session, turn
) AS e
WHERE t.started_at IS NULL AND e.session = t.session AND e.turn = t.id""",
                """CREATE INDEX IF NOT EXISTS steerable_turns_seq
    ON steerable_turns (session, seq)""",
                # NULL for the messages stored before: their time was not kept
                "ALTER TABLE steerable_messages ADD COLUMN IF NOT EXISTS at timestamptz",
                "ALTER TABLE steerable_messages ALTER COLUMN at SET DEFAULT now()",
                "ALTER TABLE steerable_sessions ADD COLUMN IF NOT EXISTS metadata text",
                """CREATE INDEX IF NOT EXISTS steerable_sessions_holder
    ON steerable_sessions (holder) WHERE holder IS NOT NULL""",
            ),
        ),
        Migration(
            5,
            "the tool journal: the calls begun and the results recorded, per session",
            (
                """CREATE TABLE IF NOT EXISTS steerable_journal (
    session    text        NOT NULL,
    key        text        NOT NULL,
    result     text,
    started_at timestamptz NOT NULL DEFAULT now(),
    ended_at   timestamptz,
    CONSTRAINT steerable_journal_key PRIMARY KEY (session, key)
)""",
            ),
        ),
        Migration(
            6,
            "an input's trace context, kept apart from its metadata",
            ("ALTER TABLE steerable_inputs ADD COLUMN IF NOT EXISTS trace text",),
        ),
        Migration(
            7,
            "a transcript's mark: new whenever a stored message is cut, changed or forked into",
            (
                # volatile: each row its own (the table is rewritten once, here)
                f"""ALTER TABLE steerable_sessions
    ADD COLUMN IF NOT EXISTS mark text NOT NULL DEFAULT {NEW_MARK}""",
            ),
        ),
    ]
)
"""The schema of the Postgres store: apply it with :func:`steerable.stores.postgres.migrate`."""

SCHEMA_VERSION: Final = len(MIGRATIONS)
"""The schema version this steerable reads and writes: the last of :data:`MIGRATIONS`."""
