"""The MySQL/MariaDB schema of steerable, as ordered migrations: tables and two procedures.

The application applies :data:`MIGRATIONS` with :func:`steerable.stores.mysql.migrate`
(which records each version in ``steerable_schema``); steerable's store runs none of it.
MySQL commits DDL statement by statement, so a step cannot be one transaction: every
statement of a step is idempotent instead (``IF NOT EXISTS``), and a step cut off half way
is run again whole by the next ``migrate``. To change the schema, append a step; never edit
one that has shipped.

Why a stored procedure: a save-and-take must check the transcript's length, append the
new messages, take waiting steers and record them, all in one transaction. Done from the
client that is six statements or more, each a round trip; ``steerable_save_v1`` (now
``steerable_save_v2``, see step 7) does it server side and is called once, so a step costs
one round trip, steered or not. (One
multi-statement text could do it too, but it has no IF: a conflict would have to be
forced into an error by a trick, and MySQL has no anonymous block to hold the logic.)
Its name carries its own version: a step that changes it adds ``_v2`` beside it, and a
database missing the procedure tells the caller plainly which step to apply. Step 2's
``steerable_step_v1`` is the service's step made the same way: fenced by the lease's epoch
and holder under the session's row lock, then the save, the take of the steers offered to
the running turn and the durable events, in one CALL. Both run with the caller's rights
(``SQL SECURITY INVOKER``): the application's user needs SELECT, INSERT, UPDATE and DELETE
on the tables and EXECUTE on the procedures; the migrating user also CREATE, ALTER, INDEX
and CREATE ROUTINE, ALTER ROUTINE (step 3 makes, calls and drops a procedure of its own).
Step 3 adds no procedure: the messages' new ``at`` column has a default, which the inserts
of both procedures take, so the save and the step stay one CALL each. Step 4 adds one
table, the tool journal's, written by plain transactions of the store (see ``._journal``).
Step 5 adds an input's ``trace`` column the way step 3 adds its columns (a procedure of its
own, dropped at its end), so it needs the same rights. Step 6 adds the service row's
``mark`` the same way, then gives it a default (a new UUID each row) and each row of before
its own. Step 7 makes ``steerable_save_v2`` and ``steerable_step_v2``: the
procedures of steps 1 and 2 (made from their very text), except that they answer the steers
they recorded only when they took some, since a result set is a large part of a small
save's cost; the procedures of before stay, for a steerable of before still running. Step 8
makes ``steerable_save_v3`` and ``steerable_step_v3`` from those, which look at the steers
only when one may wait: the session's lock row gets a ``steers`` mark, set by a trigger on
every insert into the steers table (so the migrating user also needs TRIGGER; a trigger
runs with its definer's rights, so that account must stay), and the step bounds its take by
what its turn was offered. The procedures of before stay again.

MariaDB (10.6+) and MySQL (8.0.29+) both run every statement here as written: they share
``JSON_TABLE``, window functions, ``SIGNAL``, ``SKIP LOCKED``, indexed generated columns
and ``CREATE PROCEDURE IF NOT EXISTS`` / ``CREATE TRIGGER IF NOT EXISTS`` (MySQL before
8.0.29 lacks the last two; drop ``IF NOT EXISTS`` there).
"""

from __future__ import annotations

from typing import Final

from steerable.stores.migrations import Migration, validated

__all__ = [
    "CONFLICT",
    "FENCED",
    "MIGRATIONS",
    "NEW_MARK",
    "NOW",
    "SAVE",
    "SCHEMA_VERSION",
    "STEP",
]

_SAVE_V1 = "steerable_save_v1"
_STEP_V1 = "steerable_step_v1"
_SAVE_V2_NAME = "steerable_save_v2"
_STEP_V2_NAME = "steerable_step_v2"

SAVE = "steerable_save_v3"
"""The stored procedure that appends messages and takes steers (made by step 8; step 1
made ``steerable_save_v1`` and step 7 ``steerable_save_v2``, which answer the same)."""

CONFLICT = "steerable: transcript conflict, stored "
"""How ``SAVE`` starts the message of the error it raises on a conflict; the count follows."""

STEP = "steerable_step_v3"
"""The stored procedure of the service's fenced save-and-take (made by step 8; step 2 made
``steerable_step_v1`` and step 7 ``steerable_step_v2``, which answer the same)."""

FENCED = "steerable: fenced, epochs "
"""How ``STEP`` starts the message of its error for a stale lease: the lease's epoch and
the session's (``none`` without a row) follow, separated by a space."""

NOW = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) * 0.000001"
"""The server's clock as UTC seconds since the Unix epoch, exact to the microsecond and the
same whatever the connection's time_zone (``UNIX_TIMESTAMP(NOW(6))`` is not, around DST)."""

NEW_MARK = "REPLACE(UUID(), '-', '')"
"""A new transcript mark (see :class:`steerable.service_store.Claim`): the default of a
session's service row (step 6), and what every write that cuts, changes or forks into a
transcript sets. A UUID is evaluated row by row and never repeats, so a session deleted and
begun again never finds its old mark."""

# Ids are their UTF-8 bytes (up to 255 characters): they compare byte for byte, so "a" and
# "A", "e\u0301" and "\u00e9", "a" and "a " are distinct ids. utf8mb4_bin would not do: it
# is a PAD SPACE collation, equal for "a" and "a " (and its NO PAD twin is spelled
# utf8mb4_nopad_bin on MariaDB and utf8mb4_0900_bin on MySQL).
_ID = "VARBINARY(1020) NOT NULL"
# a message's codec text: LONGTEXT, never a JSON column (it would rewrite the text)
_BODY = "LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL"
_TABLE = "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"

_STEP_1 = (
    # One row per session that was ever written: the lock every save of the session takes
    # first, so writers and takers of one session queue up instead of racing.
    f"""CREATE TABLE IF NOT EXISTS steerable_sessions (
    session {_ID},
    PRIMARY KEY (session)
) {_TABLE}""",
    f"""CREATE TABLE IF NOT EXISTS steerable_messages (
    session  {_ID},
    position BIGINT NOT NULL,
    id       {_ID},
    body     {_BODY},
    PRIMARY KEY (session, position),
    UNIQUE KEY steerable_messages_id (session, id)
) {_TABLE}""",
    # A steer keeps its message's codec text, made when it is left, so the procedure can
    # record it by copying; ``taken_at`` is the position it was recorded at, NULL while it
    # waits. The row stays after the take: a steer id seen before is ignored forever.
    f"""CREATE TABLE IF NOT EXISTS steerable_steers (
    seq      BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    session  {_ID},
    id       {_ID},
    body     {_BODY},
    taken_at BIGINT NULL,
    PRIMARY KEY (seq),
    UNIQUE KEY steerable_steers_id (session, id),
    KEY steerable_steers_waiting (session, taken_at, seq)
) {_TABLE}""",
    f"""CREATE PROCEDURE IF NOT EXISTS {_SAVE_V1}(
    IN p_session VARBINARY(1020),
    IN p_at BIGINT,
    IN p_take INT,
    IN p_messages LONGTEXT CHARACTER SET utf8mb4
)
MODIFIES SQL DATA
SQL SECURITY INVOKER
COMMENT 'steerable: append messages at p_at (NULL: at the end), take up to p_take steers'
BEGIN
    DECLARE v_end BIGINT;
    DECLARE v_mark BIGINT;
    DECLARE v_taken INT DEFAULT 0;
    DECLARE v_error VARCHAR(128);
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;
    START TRANSACTION;
    -- the session's lock: an exclusive row lock (on a duplicate key too) that every writer
    -- of the session holds until it commits
    INSERT INTO steerable_sessions (session) VALUES (p_session)
        ON DUPLICATE KEY UPDATE session = session;
    -- mark the steers to take (-1: being taken, seen by no one else before COMMIT); an
    -- UPDATE locks them exclusively at once, where a SELECT would share-lock and upgrade
    IF p_take > 0 THEN
        UPDATE steerable_steers SET taken_at = -1
            WHERE session = p_session AND taken_at IS NULL ORDER BY seq LIMIT p_take;
        SET v_taken = ROW_COUNT();
    END IF;
    -- the transaction's first plain read, so its snapshot is taken now, under the lock:
    -- every earlier writer of the session has committed, and no later one can write
    SELECT COALESCE(MAX(position) + 1, 0) INTO v_end
        FROM steerable_messages WHERE session = p_session;
    IF p_at IS NOT NULL AND p_at <> v_end THEN
        SET v_error = CONCAT('{CONFLICT}', v_end);
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_error;
    END IF;
    -- p_messages is a JSON array of [id, codec text] pairs; each text is a JSON string in
    -- it, so it comes out exactly as the client encoded it
    INSERT INTO steerable_messages (session, position, id, body)
        SELECT p_session, v_end + m.n - 1, m.id, m.body
        FROM JSON_TABLE(p_messages, '$[*]' COLUMNS (
            n FOR ORDINALITY,
            id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
            body LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]'
        )) AS m;
    SET v_mark = v_end + JSON_LENGTH(p_messages);
    IF v_taken > 0 THEN
        -- a steer whose id the transcript holds already (recorded another way, or in this
        -- very save) is taken but not recorded again
        INSERT INTO steerable_messages (session, position, id, body)
            SELECT session, v_mark - 1 + ROW_NUMBER() OVER (ORDER BY seq), id, body
            FROM steerable_steers AS s
            WHERE session = p_session AND taken_at = -1 AND NOT EXISTS (
                SELECT 1 FROM steerable_messages AS m
                WHERE m.session = p_session AND m.id = s.id);
        -- every taken steer points at the message that records it
        UPDATE steerable_steers AS s
            JOIN steerable_messages AS m ON m.session = s.session AND m.id = s.id
            SET s.taken_at = m.position
            WHERE s.session = p_session AND s.taken_at = -1;
    END IF;
    -- answered before COMMIT so that nothing runs after it: on a connection without
    -- autocommit, a statement after COMMIT would open a transaction and leave it open
    SELECT id, body FROM steerable_messages
        WHERE session = p_session AND position >= v_mark ORDER BY position;
    COMMIT;
END""",
)

# Times are seconds since the Unix epoch on the server's clock, as exact decimals: UTC, so
# they read the same whatever a connection's time_zone is.
_TIME = "DECIMAL(20, 6)"
_KIND = "VARCHAR(16) CHARACTER SET ascii NOT NULL"
# an input's text, a turn's answer or error: the JSON text of the str, so a NUL, a lone
# surrogate and every other code point comes back exactly
_JSON_STR = "LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"

_STEP_2 = (
    # One row per session the service wrote to: the lock every service write of the
    # session takes first (before the core's steerable_sessions row), its fencing epoch and
    # lease, the running turn and the counters that number inputs, turns and events.
    # ``claimable`` is when the session may be claimed: at once (0) when inputs wait and no
    # turn runs, at the lease's expiry while a turn runs, NULL when there is no work; a
    # claim naming no session reads its index, never the sessions nobody is waiting on.
    f"""CREATE TABLE IF NOT EXISTS steerable_service (
    session     {_ID},
    epoch       BIGINT NOT NULL DEFAULT 0,
    holder      VARBINARY(1020) NULL,
    expires     {_TIME} NULL,
    running     VARBINARY(1020) NULL,
    queued      BIGINT NOT NULL DEFAULT 0,
    inputs      BIGINT NOT NULL DEFAULT 0,
    turns       BIGINT NOT NULL DEFAULT 0,
    events      BIGINT NOT NULL DEFAULT 0,
    claimable   {_TIME} GENERATED ALWAYS AS (CASE
        WHEN running IS NOT NULL THEN COALESCE(expires, 0)
        WHEN queued > 0 THEN 0
    END) STORED,
    PRIMARY KEY (session),
    KEY steerable_service_claimable (claimable)
) {_TABLE}""",
    # ``turn``: the turn a waiting input was offered to, the turn that took it, or (for a
    # prompt) its own id; ``offered`` and ``ahead`` are the first answer, given again to a
    # duplicate. A steer keeps the codec text of the message that records it (``body``),
    # so the step procedure records it by copying.
    f"""CREATE TABLE IF NOT EXISTS steerable_inputs (
    session  {_ID},
    seq      BIGINT NOT NULL,
    id       {_ID},
    kind     {_KIND},
    text     {_JSON_STR} NOT NULL,
    body     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    offered  VARBINARY(1020) NULL,
    ahead    BIGINT NOT NULL,
    state    {_KIND},
    turn     VARBINARY(1020) NULL,
    step     BIGINT NULL,
    PRIMARY KEY (session, seq),
    UNIQUE KEY steerable_inputs_id (session, id),
    KEY steerable_inputs_waiting (session, state, turn, seq)
) {_TABLE}""",
    # ``ord`` is the order of claims: two turns may start at one position (the first wrote
    # nothing), and a message belongs to the later.
    f"""CREATE TABLE IF NOT EXISTS steerable_turns (
    session        {_ID},
    id             {_ID},
    ord            BIGINT NOT NULL,
    start_position BIGINT NOT NULL,
    cap            BIGINT NOT NULL,
    state          {_KIND},
    epoch          BIGINT NOT NULL,
    steps          BIGINT NOT NULL DEFAULT 0,
    steers_taken   BIGINT NOT NULL DEFAULT 0,
    offered        BIGINT NOT NULL DEFAULT 0,
    stop_requested BOOLEAN NOT NULL DEFAULT FALSE,
    end_position   BIGINT NULL,
    answer         {_JSON_STR} NULL,
    error          {_JSON_STR} NULL,
    PRIMARY KEY (session, id),
    UNIQUE KEY steerable_turns_ord (session, ord)
) {_TABLE}""",
    f"""CREATE TABLE IF NOT EXISTS steerable_events (
    session {_ID},
    id      BIGINT NOT NULL,
    kind    {_KIND},
    turn    VARBINARY(1020) NULL,
    data    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    at      {_TIME} NOT NULL,
    PRIMARY KEY (session, id)
) {_TABLE}""",
    # The service's save-and-take, one CALL as the core's is: fenced under the session's
    # row lock, then the core's lock, then SAVE's checks and appends, the take of the
    # steers offered to the turn, and the events, all in one transaction. ``p_messages`` is
    # a JSON array of [id, codec text, message event data] triples (the data is JSON text
    # in a JSON string; its position is p_at + index, the client knows it).
    f"""CREATE PROCEDURE IF NOT EXISTS {_STEP_V1}(
    IN p_session VARBINARY(1020),
    IN p_holder VARBINARY(1020),
    IN p_epoch BIGINT,
    IN p_at BIGINT,
    IN p_take BIGINT,
    IN p_counted BOOLEAN,
    IN p_messages LONGTEXT CHARACTER SET utf8mb4
)
MODIFIES SQL DATA
SQL SECURITY INVOKER
COMMENT 'steerable: a fenced step of the running turn: append at p_at, take its steers'
BEGIN
    DECLARE v_found BOOLEAN DEFAULT TRUE;
    DECLARE v_epoch BIGINT;
    DECLARE v_holder VARBINARY(1020);
    DECLARE v_turn VARBINARY(1020);
    DECLARE v_events BIGINT;
    DECLARE v_now {_TIME};
    DECLARE v_end BIGINT;
    DECLARE v_mark BIGINT;
    DECLARE v_steps BIGINT;
    DECLARE v_taken BIGINT;
    DECLARE v_cap BIGINT;
    DECLARE v_stop BOOLEAN;
    DECLARE v_room BIGINT;
    DECLARE v_took BIGINT DEFAULT 0;
    DECLARE v_recorded BIGINT DEFAULT 0;
    DECLARE v_concat BIGINT DEFAULT @@SESSION.group_concat_max_len;
    DECLARE v_error VARCHAR(128);
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_found = FALSE;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN
        ROLLBACK;
        SET SESSION group_concat_max_len = v_concat;
        RESIGNAL;
    END;
    START TRANSACTION;
    SELECT epoch, holder, running, events, {NOW}
        INTO v_epoch, v_holder, v_turn, v_events, v_now
        FROM steerable_service WHERE session = p_session FOR UPDATE;
    IF NOT v_found OR v_epoch <> p_epoch OR v_holder IS NULL OR v_holder <> p_holder
            OR v_turn IS NULL THEN
        SET v_error = CONCAT('{FENCED}', p_epoch, ' ', IF(v_found, v_epoch, 'none'));
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_error;
    END IF;
    -- the core's lock, before the first plain read (see SAVE)
    INSERT INTO steerable_sessions (session) VALUES (p_session)
        ON DUPLICATE KEY UPDATE session = session;
    SELECT steps, steers_taken, cap, stop_requested INTO v_steps, v_taken, v_cap, v_stop
        FROM steerable_turns WHERE session = p_session AND id = v_turn;
    SELECT COALESCE(MAX(position) + 1, 0) INTO v_end
        FROM steerable_messages WHERE session = p_session;
    IF p_at <> v_end THEN
        SET v_error = CONCAT('{CONFLICT}', v_end);
        SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_error;
    END IF;
    -- a message id stored already, or twice in the batch: a duplicate key, refused whole
    INSERT INTO steerable_messages (session, position, id, body)
        SELECT p_session, p_at + m.n - 1, m.id, m.body
        FROM JSON_TABLE(p_messages, '$[*]' COLUMNS (
            n FOR ORDINALITY,
            id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
            body LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]'
        )) AS m;
    INSERT INTO steerable_events (session, id, kind, turn, data, at)
        SELECT p_session, v_events + m.n, 'message', v_turn, m.data, v_now
        FROM JSON_TABLE(p_messages, '$[*]' COLUMNS (
            n FOR ORDINALITY,
            data LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[2]'
        )) AS m;
    SET v_mark = p_at + JSON_LENGTH(p_messages);
    SET v_events = v_events + JSON_LENGTH(p_messages);
    SET v_steps = v_steps + IF(p_counted, 1, 0);
    SET v_room = IF(v_stop, 0, GREATEST(0, LEAST(p_take, v_cap - v_taken)));
    IF v_room > 0 THEN
        -- a take is a step, so the step number names the steers this one took
        UPDATE steerable_inputs SET state = 'taken', step = v_steps
            WHERE session = p_session AND state = 'waiting' AND turn = v_turn
            ORDER BY seq LIMIT v_room;
        SET v_took = ROW_COUNT();
    END IF;
    IF v_took > 0 THEN
        SET SESSION group_concat_max_len = 4294967295;
        INSERT INTO steerable_events (session, id, kind, turn, data, at)
            SELECT p_session, v_events + 1, 'steers_taken', v_turn, CONCAT('{{"ids":[',
                GROUP_CONCAT(JSON_QUOTE(CONVERT(id USING utf8mb4)) ORDER BY seq SEPARATOR ','),
                '],"step":', v_steps, '}}'), v_now
            FROM steerable_inputs
            WHERE session = p_session AND state = 'taken' AND turn = v_turn AND step = v_steps;
        SET SESSION group_concat_max_len = v_concat;
        SET v_events = v_events + 1;
        -- a steer whose id the transcript holds already is taken but not recorded again
        INSERT INTO steerable_messages (session, position, id, body)
            SELECT session, v_mark - 1 + ROW_NUMBER() OVER (ORDER BY seq), id, body
            FROM steerable_inputs AS i
            WHERE session = p_session AND state = 'taken' AND turn = v_turn
                AND step = v_steps AND NOT EXISTS (
                    SELECT 1 FROM steerable_messages AS m
                    WHERE m.session = p_session AND m.id = i.id);
        SET v_recorded = ROW_COUNT();
        INSERT INTO steerable_events (session, id, kind, turn, data, at)
            SELECT p_session, v_events + position - v_mark + 1, 'message', v_turn,
                CONCAT('{{"position":', position, ',"id":', JSON_QUOTE(CONVERT(id USING utf8mb4)),
                    ',"role":"user","steered":true}}'), v_now
            FROM steerable_messages WHERE session = p_session AND position >= v_mark;
        SET v_events = v_events + v_recorded;
    END IF;
    IF p_counted THEN
        SET v_events = v_events + 1;
        INSERT INTO steerable_events (session, id, kind, turn, data, at) VALUES (p_session,
            v_events, 'step', v_turn,
            CONCAT('{{"step":', v_steps, ',"length":', v_mark + v_recorded, '}}'), v_now);
    END IF;
    UPDATE steerable_turns SET steps = v_steps, steers_taken = steers_taken + v_took
        WHERE session = p_session AND id = v_turn;
    UPDATE steerable_service SET events = v_events WHERE session = p_session;
    -- answered before COMMIT, as SAVE is: the steers recorded, in order
    SELECT id, body FROM steerable_messages
        WHERE session = p_session AND position >= v_mark ORDER BY position;
    COMMIT;
END""",
)

# Step 3 adds columns and keys to the tables of steps 1 and 2. Neither server has one
# spelling of "ADD COLUMN IF NOT EXISTS" (MySQL has none), so a procedure made for the step
# checks information_schema and alters each table once; one ALTER per table is atomic on
# both, so its first new column marks it done. It is dropped at the end (and first, in case
# a migrator was cut off before that). Columns are added NULL without a default, so the
# rows of before read None ("not recorded") rather than the time of the migration, and
# the ALTER is instant on both servers; the messages' time gets its default afterwards.
_MIGRATE_3 = "steerable_migrate_v3"


def _once(table: str, marker: str, alter: str) -> str:
    return f"""IF NOT EXISTS (SELECT 1 FROM information_schema.COLUMNS
            WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = '{table}'
            AND COLUMN_NAME = '{marker}') THEN
        ALTER TABLE {table} {alter};
    END IF;"""


# each table's additions, one ALTER, done once (its first column marks it)
_MESSAGES_3 = _once("steerable_messages", "at", f"ADD COLUMN at {_TIME} NULL")
# an input's metadata (JSON text of an object; NULL: none) and arrival; the key gives the
# waiting inputs (or any one state's) in their order, so a bounded view reads no more
_INPUTS_3 = _once(
    "steerable_inputs",
    "metadata",
    f"ADD COLUMN metadata {_JSON_STR} NULL, ADD COLUMN at {_TIME} NULL,"
    " ADD KEY steerable_inputs_state (session, state, seq)",
)
# a turn's prompt's seq (the order turns start in, which pages them), its times and its
# usage (JSON text of an object; NULL: none)
_TURNS_3 = _once(
    "steerable_turns",
    "seq",
    f"ADD COLUMN seq BIGINT NOT NULL DEFAULT 0, ADD COLUMN started_at {_TIME} NULL,"
    f" ADD COLUMN ended_at {_TIME} NULL, ADD COLUMN token_usage {_JSON_STR} NULL,"
    " ADD KEY steerable_turns_seq (session, seq)",
)
# the session's metadata; the holder's key is the stop poll's: the sessions one replica
# holds, in order, with no read of anyone else's
_SERVICE_3 = _once(
    "steerable_service",
    "metadata",
    f"ADD COLUMN metadata {_JSON_STR} NULL, ADD KEY steerable_service_holder (holder, session)",
)

_STEP_3 = (
    f"DROP PROCEDURE IF EXISTS {_MIGRATE_3}",
    f"""CREATE PROCEDURE {_MIGRATE_3}()
MODIFIES SQL DATA
SQL SECURITY INVOKER
COMMENT 'steerable: schema step 3, made and dropped by the step itself'
BEGIN
    {_MESSAGES_3}
    -- when a message was stored: every insert (the procedures' too) takes the default
    ALTER TABLE steerable_messages ALTER COLUMN at SET DEFAULT ({NOW});
    {_INPUTS_3}
    {_TURNS_3}
    {_SERVICE_3}
END""",
    f"CALL {_MIGRATE_3}()",
    f"DROP PROCEDURE {_MIGRATE_3}",
    # the turns of before: their prompt's seq (a turn's id is its prompt's)
    """UPDATE steerable_turns AS t
    JOIN steerable_inputs AS i ON i.session = t.session AND i.id = t.id
    SET t.seq = i.seq WHERE t.seq = 0""",
)

# Step 4: the tool journal (steerable.store.Journaling), one row per call of a session:
# ``result`` NULL while the call is started and not ended, then the stored text of its
# result (steerable.journal.encode_result), never a JSON column (it would rewrite it).
_STEP_4 = (
    f"""CREATE TABLE IF NOT EXISTS steerable_journal (
    session  {_ID},
    call_key {_ID},
    result   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    PRIMARY KEY (session, call_key)
) {_TABLE}""",
)

# Step 5: an input's trace context (issue 21), the W3C carrier of the span that sent it, as
# JSON text of an object beside the user's metadata; NULL for {}, as metadata, so the
# inputs of before read {} and the ALTER is instant. Made as step 3's additions are: a
# procedure of the step's own checks information_schema (MySQL has no ADD COLUMN IF NOT
# EXISTS), made, called and dropped by the step, so a step cut off half way runs again.
_MIGRATE_5 = "steerable_migrate_v5"
_INPUTS_5 = _once("steerable_inputs", "trace", f"ADD COLUMN trace {_JSON_STR} NULL")

_STEP_5 = (
    f"DROP PROCEDURE IF EXISTS {_MIGRATE_5}",
    f"""CREATE PROCEDURE {_MIGRATE_5}()
MODIFIES SQL DATA
SQL SECURITY INVOKER
COMMENT 'steerable: schema step 5, made and dropped by the step itself'
BEGIN
    {_INPUTS_5}
END""",
    f"CALL {_MIGRATE_5}()",
    f"DROP PROCEDURE {_MIGRATE_5}",
)

# Step 6: a transcript's mark (issue 24) on the session's service row, which a claim returns
# and a claimer passes back to be given only what it does not hold. Added NULL without a
# default, through a procedure of the step's own as step 5's column is (instant on both
# servers); then the default, so every row made from here on gets its own; then each row of
# before gets its own (an UPDATE evaluates the UUID row by row). In that order, a row an
# older steerable makes meanwhile has a mark by one or the other. A row left NULL (none
# should be) is read as a mark of "", which no claimer holds: its claims return the whole
# transcript.
_MIGRATE_6 = "steerable_migrate_v6"
_SERVICE_6 = _once(
    "steerable_service",
    "mark",
    "ADD COLUMN mark CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NULL",
)

_STEP_6 = (
    f"DROP PROCEDURE IF EXISTS {_MIGRATE_6}",
    f"""CREATE PROCEDURE {_MIGRATE_6}()
MODIFIES SQL DATA
SQL SECURITY INVOKER
COMMENT 'steerable: schema step 6, made and dropped by the step itself'
BEGIN
    {_SERVICE_6}
END""",
    f"CALL {_MIGRATE_6}()",
    f"DROP PROCEDURE {_MIGRATE_6}",
    f"ALTER TABLE steerable_service ALTER COLUMN mark SET DEFAULT ({NEW_MARK})",
    f"UPDATE steerable_service SET mark = {NEW_MARK} WHERE mark IS NULL",
)

# Step 7: the save and the step, as steps 1 and 2 made them, but answering their steers only
# when they took some. A result set costs the server and the client more than the rest of
# a small save but its INSERT (measured 2026-12-04 on MariaDB 10.11: about 80-145 us of a
# 610-770 us CALL of steerable_save_v1, whose floor is a 300-350 us autocommit INSERT), and
# the final SELECT could only find the steers just recorded: with none taken, it found
# nothing. A CALL without it answers no rows, which the client reads as none taken. The new
# procedures stand beside the old ones (a procedure's name carries its version), so a
# steerable of before that is running still calls those, which answer as they always did.


def _replaced(text: str, old: str, new: str) -> str:
    if text.count(old) != 1:
        raise AssertionError(f"a step derives from an earlier one: {old!r} is not in it once")
    return text.replace(old, new)


_ANSWER = """SELECT id, body FROM steerable_messages
        WHERE session = p_session AND position >= v_mark ORDER BY position;"""


def _answer_if(taken: str) -> str:
    return f"""IF {taken} > 0 THEN
        SELECT id, body FROM steerable_messages
            WHERE session = p_session AND position >= v_mark ORDER BY position;
    END IF;"""


_SAVE_V2 = _replaced(
    _replaced(
        _STEP_1[3],
        f"CREATE PROCEDURE IF NOT EXISTS {_SAVE_V1}(",
        f"CREATE PROCEDURE {_SAVE_V2_NAME}(",
    ),
    _ANSWER,
    _answer_if("v_taken"),
)
_STEP_V2 = _replaced(
    _replaced(
        _STEP_2[4],
        f"CREATE PROCEDURE IF NOT EXISTS {_STEP_V1}(",
        f"CREATE PROCEDURE {_STEP_V2_NAME}(",
    ),
    _ANSWER,
    _answer_if("v_took"),
)

_STEP_7 = (
    f"DROP PROCEDURE IF EXISTS {_SAVE_V2_NAME}",
    _SAVE_V2,
    f"DROP PROCEDURE IF EXISTS {_STEP_V2_NAME}",
    _STEP_V2,
)

# Step 8: a save skips the steers table when no steer may wait (issue 24). Every save with a
# take ran an UPDATE of the steers table, which costs about 50-65 us of a 650-700 us save
# (measured 2026-12-04 on MariaDB 10.11, CALLs on a held connection, none waiting; the floor,
# a two-row autocommit INSERT, took 480-540 us) without finding a row. So the session's lock
# row gets a mark, ``steers``, FALSE only when no steer of the session waits, and the save
# reads it with the lock: ``SELECT ... FOR UPDATE`` of the row in place of the INSERT that
# made or locked it (that INSERT only when the row is missing), cheaper than the INSERT on
# its own. The mark is kept by the server, so a steerable of before that is still running
# keeps it too:
#
# - A trigger sets it before every insert into the steers table (``steer()``, an old one's
#   too), in the insert's transaction, making the lock row if missing: the insert takes the
#   session's lock first, as a save does, so a save that holds the lock sees either no
#   steer of the insert or the mark set.
# - Only the new save (``steerable_save_v3``) clears it, under the lock, when its take found
#   fewer steers than it could take: none waits then. A rollback restores it with the rest.
# - The column's default is TRUE: for the rows of before (a steer of theirs may wait) and for
#   a row made by anything but the trigger (the saves, the service, the rewrite verbs). A TRUE
#   mark costs the next save with a take the UPDATE it always ran, which then clears it.
#
# A delete of a session's steers, or a take by an old procedure, may leave the mark TRUE with
# none waiting: the next save with a take looks, as it always did. Nothing turns a taken
# steer back into a waiting one. The new save's lock is a locking read, which on a row that
# is missing locks the gap under REPEATABLE READ: two first saves of one session at once
# can deadlock there, and the one rolled back runs again (the store retries a deadlock).
#
# The service's step (``steerable_step_v3``) needs no new column: its turn's row counts the
# steers offered to it (``offered``: at each offer, and at the turn's start those offered
# while it waited) and those it took (``steers_taken``), and a steer freed or cancelled stays
# counted, so ``offered - steers_taken`` is never below the number waiting for the turn. The
# step takes at most that many, so it skips the inputs table when none was offered since.
_MIGRATE_8 = "steerable_migrate_v8"
_SESSIONS_8 = _once(
    "steerable_sessions", "steers", "ADD COLUMN steers BOOLEAN NOT NULL DEFAULT TRUE"
)
_MARK_8 = "steerable_steers_mark"

_LOCK_V2 = (
    "-- the session's lock: an exclusive row lock (on a duplicate key too) that every writer"
    """
    -- of the session holds until it commits
    INSERT INTO steerable_sessions (session) VALUES (p_session)
        ON DUPLICATE KEY UPDATE session = session;"""
)

_LOCK_V3 = """-- the session's lock: an exclusive lock of its row, which every writer of the session
    -- holds until it commits, made if missing (a locking read takes no snapshot); and the
    -- row's mark, which says whether a steer may wait (see schema step 8)
    SELECT steers INTO v_steers FROM steerable_sessions
        WHERE session = p_session FOR UPDATE;
    IF v_steers IS NULL THEN
        INSERT INTO steerable_sessions (session) VALUES (p_session)
            ON DUPLICATE KEY UPDATE session = session;
        SELECT steers INTO v_steers FROM steerable_sessions
            WHERE session = p_session FOR UPDATE;
    END IF;"""

_TAKE_V2 = """-- mark the steers to take (-1: being taken, seen by no one else before COMMIT); an
    -- UPDATE locks them exclusively at once, where a SELECT would share-lock and upgrade
    IF p_take > 0 THEN
        UPDATE steerable_steers SET taken_at = -1
            WHERE session = p_session AND taken_at IS NULL ORDER BY seq LIMIT p_take;
        SET v_taken = ROW_COUNT();
    END IF;"""

_TAKE_V3 = """-- mark the steers to take (-1: being taken, seen by no one else before COMMIT), if
    -- any may wait; an UPDATE locks them exclusively at once, where a SELECT would
    -- share-lock and upgrade
    IF p_take > 0 AND v_steers THEN
        UPDATE steerable_steers SET taken_at = -1
            WHERE session = p_session AND taken_at IS NULL ORDER BY seq LIMIT p_take;
        SET v_taken = ROW_COUNT();
        IF v_taken < p_take THEN  -- it took every steer that waited
            UPDATE steerable_sessions SET steers = FALSE WHERE session = p_session;
        END IF;
    END IF;"""

_HANDLER = "DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;"

_SAVE_V3 = _replaced(
    _replaced(
        _replaced(
            _replaced(_SAVE_V2, f"CREATE PROCEDURE {_SAVE_V2_NAME}(", f"CREATE PROCEDURE {SAVE}("),
            f"DECLARE v_error VARCHAR(128);\n    {_HANDLER}",
            # a missing lock row leaves v_steers NULL, with no warning for the client
            f"DECLARE v_error VARCHAR(128);\n    DECLARE v_steers BOOLEAN DEFAULT NULL;\n"
            f"    DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;\n    {_HANDLER}",
        ),
        _LOCK_V2,
        _LOCK_V3,
    ),
    _TAKE_V2,
    _TAKE_V3,
)

_TURN_V2 = """SELECT steps, steers_taken, cap, stop_requested INTO v_steps, v_taken, v_cap, v_stop
        FROM steerable_turns WHERE session = p_session AND id = v_turn;"""

_TURN_V3 = """-- offered - steers_taken: never fewer than wait for the turn (see schema step 8)
    SELECT steps, steers_taken, cap, stop_requested, offered
        INTO v_steps, v_taken, v_cap, v_stop, v_offered
        FROM steerable_turns WHERE session = p_session AND id = v_turn;"""

_STEP_V3 = _replaced(
    _replaced(
        _replaced(
            _replaced(_STEP_V2, f"CREATE PROCEDURE {_STEP_V2_NAME}(", f"CREATE PROCEDURE {STEP}("),
            "DECLARE v_cap BIGINT;",
            "DECLARE v_cap BIGINT;\n    DECLARE v_offered BIGINT;",
        ),
        _TURN_V2,
        _TURN_V3,
    ),
    "LEAST(p_take, v_cap - v_taken)",
    "LEAST(p_take, v_cap - v_taken, v_offered - v_taken)",
)

_STEP_8 = (
    f"DROP PROCEDURE IF EXISTS {_MIGRATE_8}",
    f"""CREATE PROCEDURE {_MIGRATE_8}()
MODIFIES SQL DATA
SQL SECURITY INVOKER
COMMENT 'steerable: schema step 8, made and dropped by the step itself'
BEGIN
    {_SESSIONS_8}
END""",
    f"CALL {_MIGRATE_8}()",
    f"DROP PROCEDURE {_MIGRATE_8}",
    f"""CREATE TRIGGER IF NOT EXISTS {_MARK_8} BEFORE INSERT ON steerable_steers FOR EACH ROW
    INSERT INTO steerable_sessions (session) VALUES (NEW.session)
        ON DUPLICATE KEY UPDATE steers = TRUE""",
    f"DROP PROCEDURE IF EXISTS {SAVE}",
    _SAVE_V3,
    f"DROP PROCEDURE IF EXISTS {STEP}",
    _STEP_V3,
)

MIGRATIONS: Final = validated(
    [
        Migration(1, "the sessions, messages and steers tables and the save procedure", _STEP_1),
        Migration(2, "the service's tables: sessions' leases, inputs, turns, events", _STEP_2),
        Migration(
            3,
            "inputs' and sessions' metadata, times of inputs, turns and messages, turns' usage;"
            " keys for the bounded views and the stop poll",
            _STEP_3,
        ),
        Migration(4, "the tool journal: a row per call key of a session, its result", _STEP_4),
        Migration(5, "an input's trace context, kept apart from its metadata", _STEP_5),
        Migration(
            6,
            "a transcript's mark: new whenever a stored message is cut, changed or forked into",
            _STEP_6,
        ),
        Migration(
            7,
            "the save and the step procedures answer their steers only when they took some",
            _STEP_7,
        ),
        Migration(
            8,
            "a steers mark on the session's lock row, kept by a trigger; a save and a step"
            " that skip the steers when none may wait",
            _STEP_8,
        ),
    ]
)
"""The schema of the MySQL/MariaDB store: apply it with :func:`steerable.stores.mysql.migrate`."""

SCHEMA_VERSION: Final = len(MIGRATIONS)
"""The schema version this steerable reads and writes: the last of :data:`MIGRATIONS`."""
