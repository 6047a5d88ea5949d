"""The Postgres store's service writes of a turn's life: each one statement, fenced inside it.

``enqueue``, ``claim``, ``renew``, ``step``, ``end_turn`` (with the turn's last save too)
and ``stop`` are each one locking write (:mod:`._statements`: one SQL statement of
data-modifying CTEs that locks the session's row first, so one atomic step and one round
trip once asyncpg has prepared it). ``cancel`` (:mod:`._cancel`), the views and
``set_metadata`` (:mod:`._views`) and the hints (:mod:`._hints`) live beside them;
:class:`PostgresServiceTables` is all of them.

A lease expires on the server's clock: ``now()`` (the statement's start there), also in a
claim's test for a live lease, and ``expires_at`` is its seconds since the Unix epoch.
A claim of one session waits for its lock, then finds the lease its winner took; a claim
of any session takes the first with work under ``FOR UPDATE SKIP LOCKED`` from the partial
index of sessions with work, so claimers pass each other instead of queueing. The times a
turn started and ended, like an input's, are the server's ``now()`` too.

Writes that make work claimable (an input while no turn runs, a turn's end with an input
waiting) and ``stop`` call ``pg_notify`` on the channel ``steerable`` inside the statement,
delivered when it commits.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import asyncpg  # type: ignore[import-untyped]

from steerable import codec
from steerable.errors import (
    Fenced,
    InvalidMessage,
    QueueFull,
    SessionNotIdle,
    StoreUnavailable,
    TranscriptConflict,
    TurnMismatch,
    UsageError,
)
from steerable.messages import Message
from steerable.service_store import (
    Accepted,
    Claim,
    Input,
    Known,
    Lease,
    Outcome,
    Renewal,
    counts_as_step,
)
from steerable.stores.postgres._cancel import PostgresCancel
from steerable.stores.postgres._first import FIRST, NO_FIRST
from steerable.stores.postgres._hints import PostgresHints
from steerable.stores.postgres._statements import CHANNEL, FLAGS, LOCKED, RETRIES, hint
from steerable.stores.postgres._views import PostgresServiceViews, json_object, object_text

__all__ = ["CHANNEL", "PostgresServiceTables"]

_POSITION_KEY = "steerable_messages_position"
_TRANSCRIPT_KEYS = (_POSITION_KEY, "steerable_messages_id")

# $1 session, $2 id, $3 kind, $4 body, $5 metadata, $6 if_idle, $7 expected_turn, $8
# max_waiting, $9 trace. A steer is offered to the running turn when it is not stopping and was
# offered fewer than its cap; while no turn runs, to the head of the queue (the first input
# waiting to be a turn: the next claim starts it, and counts the offers then); anything else
# waits to be a turn of its own. The conditions refuse in their order (`refused`), and a
# refused input writes nothing. The waiting inputs are counted only for a condition.
_ENQUEUE = f"""
WITH {LOCKED}, seen AS (
    SELECT kind, seq, offered, ahead FROM steerable_inputs WHERE session = $1 AND id = $2
), run AS (
    SELECT t.id, t.cap, t.offered, t.stop_requested
    FROM fresh JOIN steerable_turns t ON t.session = fresh.session AND t.id = fresh.running
), head AS (
    SELECT i.id FROM fresh JOIN steerable_inputs i ON i.session = fresh.session
    WHERE fresh.running IS NULL AND i.state = 'waiting' AND i.turn IS NULL
    ORDER BY i.seq LIMIT 1
), place AS (
    SELECT fresh.inputs + 1 AS seq, fresh.events + 1 AS event, fresh.queued,
        run.id AS running, run.id IS NOT NULL AS busy,
        CASE WHEN $3 <> 'steer' THEN NULL
            WHEN run.id IS NULL THEN (SELECT id FROM head)
            WHEN NOT run.stop_requested AND run.offered < run.cap THEN run.id END AS offered,
        CASE WHEN $6::boolean OR $8::bigint IS NOT NULL THEN (
            SELECT count(*) FROM steerable_inputs w WHERE w.session = $1 AND w.state = 'waiting'
        ) END AS waiting
    FROM fresh LEFT JOIN run ON true
    WHERE NOT EXISTS (SELECT FROM seen)
), verdict AS (
    SELECT place.*, CASE
        WHEN $6::boolean AND (busy OR waiting > 0) THEN 'not idle'
        WHEN $7::text IS NOT NULL AND offered IS DISTINCT FROM $7::text THEN 'mismatch'
        WHEN $8::bigint IS NOT NULL AND waiting >= $8::bigint THEN 'full'
    END AS refused
    FROM place
), answer AS (
    SELECT verdict.*, CASE WHEN offered IS NULL THEN busy::int + queued ELSE 0 END AS ahead
    FROM verdict WHERE refused IS NULL
), added AS (
    INSERT INTO steerable_inputs (
        session, seq, id, kind, body, offered, ahead, turn, metadata, trace
    )
    SELECT $1, seq, $2, $3, $4, offered, ahead, offered, $5, $9 FROM answer
), offer AS (
    UPDATE steerable_turns t SET offered = t.offered + 1
    FROM answer WHERE t.session = $1 AND t.id = answer.offered
), logged AS (
    INSERT INTO steerable_events (session, id, kind, turn, data)
    SELECT $1, event, 'input', offered,
        json_build_object('id', $2::text, 'kind', $3::text, 'turn', offered)::text
    FROM answer
), counted AS (
    UPDATE steerable_sessions s SET version = s.version + 1, inputs = answer.seq,
        events = answer.event, queued = s.queued + (answer.offered IS NULL)::int
    FROM answer WHERE s.session = $1
), hinted AS (
    SELECT {hint("work")} FROM answer WHERE NOT busy
)
SELECT {FLAGS}, (SELECT count(*) FROM hinted) AS hints,
    seen.kind AS seen_kind, seen.seq AS seen_seq, seen.offered AS seen_offered,
    seen.ahead AS seen_ahead, answer.seq, answer.offered, answer.ahead, verdict.refused,
    verdict.running, verdict.waiting, verdict.offered AS would
FROM (SELECT) AS one LEFT JOIN seen ON true LEFT JOIN answer ON true
    LEFT JOIN verdict ON true
"""

# The lock of a claim: one session (waiting for its lock), or any with work (skipping the
# locked ones), that has no live lease. $1 holder, $2 seconds, $3 cap, $4..$6 what the claimer
# knows (sessions, lengths, marks), $7 session.
_CLAIM_ONE = """
locked AS (
    SELECT * FROM steerable_sessions
    WHERE session = $7 AND (running IS NOT NULL OR queued > 0) AND expires <= now()
    FOR UPDATE
)"""

_CLAIM_ANY = """
locked AS (
    SELECT * FROM steerable_sessions
    WHERE (running IS NOT NULL OR queued > 0) AND expires <= now()
    ORDER BY expires LIMIT 1
    FOR UPDATE SKIP LOCKED
)"""

# The claim proper: take the running turn over, or start the first input waiting to be a
# turn. It returns the transcript too (from the same snapshot), so a claim is one trip. A
# new turn counts the steers offered to its prompt while it waited as offered to it (its
# first step takes them), and records its prompt's seq and the time it started; a takeover
# changes neither, and names the holder it takes the turn from (the locked row's, before
# `held` overwrites it). It leaves out the first messages the claimer knows under the
# transcript's mark (`skip`), so a replica that served the session's last turn reads only
# what came since. Its slots are :mod:`._first`'s: with `FIRST`, a new turn's claim makes
# the turn's first step too (the step's CTEs, counts, events and what it took); with
# `NO_FIRST`, the claim alone.
_CLAIM = """
WITH {locked}, fresh AS (
    SELECT locked.* FROM locked JOIN steerable_sessions snap USING (session)
    WHERE snap.version = locked.version
), prompt AS (
    SELECT i.seq, i.id, i.body FROM fresh JOIN steerable_inputs i ON i.session = fresh.session
    WHERE fresh.running IS NULL AND i.state = 'waiting' AND i.turn IS NULL
    ORDER BY i.seq LIMIT 1
), stored AS (
    SELECT coalesce(max(m.position) + 1, 0) AS n FROM steerable_messages m
    WHERE m.session = (SELECT session FROM fresh)
), skip AS (
    SELECT coalesce(max(k.n), 0) AS n
    FROM unnest($4::text[], $5::bigint[], $6::text[]) AS k (session, n, mark), fresh, stored
    WHERE k.session = fresh.session AND k.mark = fresh.mark AND k.n > 0 AND k.n <= stored.n
){first}, turn AS (
    SELECT t.id, t.start_position AS start, t.cap, t.steps, t.steers_taken, t.stop_requested,
        true AS resumed, fresh.holder AS previous_holder
    FROM fresh JOIN steerable_turns t ON t.session = fresh.session AND t.id = fresh.running
    UNION ALL
    SELECT prompt.id, stored.n, $3::bigint, {steps}, {steers}, false, false, NULL::text
    FROM prompt, stored
), began AS (
    INSERT INTO steerable_turns (
        session, id, began, start_position, cap, state, epoch, seq, offered, started_at,
        steps, steers_taken
    )
    SELECT fresh.session, turn.id, fresh.epoch + 1, turn.start, turn.cap, 'running',
        fresh.epoch + 1, prompt.seq, (
            SELECT count(*) FROM steerable_inputs o
            WHERE o.session = fresh.session AND o.state = 'waiting' AND o.turn = turn.id
        ), now(), turn.steps, turn.steers_taken
    FROM fresh, turn, prompt WHERE NOT turn.resumed
), prompted AS (
    UPDATE steerable_inputs i SET state = 'prompt', turn = i.id
    FROM fresh, prompt WHERE i.session = fresh.session AND i.seq = prompt.seq
), retaken AS (
    UPDATE steerable_turns t SET epoch = fresh.epoch + 1
    FROM fresh, turn WHERE turn.resumed AND t.session = fresh.session AND t.id = turn.id
), ev AS (
    SELECT 1 AS k, 0 AS i, 'holder' AS kind,
        json_build_object('holder', $1::text, 'epoch', fresh.epoch + 1)::text AS data
    FROM fresh, turn WHERE turn.resumed
    UNION ALL
    SELECT 2, 0, 'turn_started', json_build_object(
        'epoch', fresh.epoch + 1, 'holder', $1::text, 'resumed', turn.resumed)::text
    FROM fresh, turn{events}
), logged AS (
    INSERT INTO steerable_events (session, id, kind, turn, data)
    SELECT fresh.session, fresh.events + row_number() OVER (ORDER BY ev.k, ev.i), ev.kind,
        turn.id, ev.data
    FROM fresh, turn, ev
), held AS (
    UPDATE steerable_sessions s SET version = s.version + 1, epoch = s.epoch + 1, holder = $1,
        expires = now() + make_interval(secs => $2), running = turn.id,
        queued = s.queued - (NOT turn.resumed)::int,
        events = s.events + (SELECT count(*) FROM ev)
    FROM fresh, turn WHERE s.session = fresh.session
    RETURNING s.session, s.epoch, extract(epoch FROM s.expires)::float8 AS expires, s.mark
)
SELECT EXISTS (SELECT FROM locked) AS known, EXISTS (SELECT FROM fresh) AS fresh,
    held.session, held.epoch, held.expires, held.mark, skip.n AS skip, turn.*, i.kind, i.body,
    i.metadata, i.trace,
    (SELECT array_agg(m.id ORDER BY m.position) FROM steerable_messages m
        WHERE m.session = held.session AND m.position >= skip.n) AS ids,
    (SELECT array_agg(m.body ORDER BY m.position) FROM steerable_messages m
        WHERE m.session = held.session AND m.position >= skip.n) AS bodies{taken}
FROM (SELECT) AS one LEFT JOIN held ON true LEFT JOIN turn ON true LEFT JOIN skip ON true
    LEFT JOIN steerable_inputs i ON i.session = held.session AND i.id = turn.id
"""

_CLAIMS = {
    (named, first): _CLAIM.format(
        locked=_CLAIM_ONE if named else _CLAIM_ANY, **(FIRST if first else NO_FIRST)
    )
    for named in (False, True)
    for first in (False, True)
}
"""The claim statements, by (a session named, the first step made), formatted once."""

# The running turn of a lease that still holds the session: $2 epoch, $3 holder.
_HELD = """held AS (
    SELECT fresh.session, fresh.events, t.id, t.cap, t.steps, t.steers_taken, t.stop_requested
    FROM fresh JOIN steerable_turns t ON t.session = fresh.session AND t.id = fresh.running
    WHERE fresh.epoch = $2 AND fresh.holder = $3
)"""

# $4 seconds. The version stays: a renewal changes only the expiry.
_RENEW = f"""
WITH {LOCKED}, {_HELD}, renewed AS (
    UPDATE steerable_sessions s SET expires = now() + make_interval(secs => $4)
    FROM held WHERE s.session = held.session
    RETURNING extract(epoch FROM s.expires)::float8 AS expires
)
SELECT {FLAGS}, (SELECT expires FROM renewed) AS expires,
    (SELECT stop_requested FROM held) AS stop_requested
"""

# The save-and-take of a holder: $4 at, $5 take, $6 1 when the save is a step (else 0),
# $7..$10 the messages' ids, bodies, roles and steered flags. The events go in the memory
# reference's order (phase, then position): the messages saved, `steers_taken`, the steers
# recorded, `step`. A steer already in the transcript (or in this save) is taken, not
# recorded again. The transcript's length is max(position) on the key, never a full read.
_STEP = f"""
WITH {LOCKED}, {_HELD}, stored AS (
    SELECT coalesce(max(position) + 1, 0) AS n FROM steerable_messages WHERE session = $1
), ok AS (
    SELECT held.*, stored.n, held.steps + $6::int AS step,
        CASE WHEN held.stop_requested THEN 0
            ELSE greatest(0, least($5::bigint, held.cap - held.steers_taken)) END AS room
    FROM held, stored WHERE stored.n = $4::bigint
), offered AS (
    SELECT i.seq, i.id, i.body FROM steerable_inputs i
    WHERE i.session = $1 AND i.state = 'waiting' AND i.turn = (SELECT id FROM ok)
    ORDER BY i.seq LIMIT (SELECT room FROM ok)
), took AS (
    UPDATE steerable_inputs i SET state = 'taken', step = ok.step
    FROM ok WHERE i.session = $1 AND i.seq IN (SELECT seq FROM offered)
), recorded AS (
    SELECT o.seq, o.id, o.body, row_number() OVER (ORDER BY o.seq) AS k FROM offered o
    WHERE o.id <> ALL($7::text[]) AND NOT EXISTS (
        SELECT FROM steerable_messages m WHERE m.session = $1 AND m.id = o.id
    )
), new AS (
    SELECT m.i - 1 AS i, m.id, m.body, m.role, m.steered, 0 AS phase
    FROM unnest($7::text[], $8::text[], $9::text[], $10::boolean[])
        WITH ORDINALITY AS m (id, body, role, steered, i)
    UNION ALL
    SELECT cardinality($7::text[]) + k - 1, id, body, 'user', true, 2 FROM recorded
), written AS (
    INSERT INTO steerable_messages (session, position, id, body)
    SELECT $1, ok.n + new.i, new.id, new.body FROM ok, new ORDER BY new.i
), ev AS (
    SELECT new.phase, new.i, 'message' AS kind, json_build_object('position', ok.n + new.i,
        'id', new.id, 'role', new.role, 'steered', new.steered)::text AS data
    FROM ok, new
    UNION ALL
    SELECT 1, 0, 'steers_taken', json_build_object(
        'ids', (SELECT json_agg(id ORDER BY seq) FROM offered), 'step', ok.step)::text
    FROM ok WHERE EXISTS (SELECT FROM offered)
    UNION ALL
    SELECT 3, 0, 'step', json_build_object(
        'step', ok.step, 'length', ok.n + (SELECT count(*) FROM new))::text
    FROM ok WHERE $6::int = 1
), logged AS (
    INSERT INTO steerable_events (session, id, kind, turn, data)
    SELECT $1, ok.events + row_number() OVER (ORDER BY ev.phase, ev.i), ev.kind, ok.id, ev.data
    FROM ok, ev
), turned AS (
    UPDATE steerable_turns t SET steps = ok.step,
        steers_taken = t.steers_taken + (SELECT count(*) FROM offered)
    FROM ok WHERE t.session = $1 AND t.id = ok.id
), counted AS (
    UPDATE steerable_sessions s SET version = s.version + 1,
        events = s.events + (SELECT count(*) FROM ev)
    FROM ok WHERE s.session = $1
)
SELECT {FLAGS}, EXISTS (SELECT FROM held) AS holds, (SELECT n FROM stored) AS n,
    recorded.id, recorded.body
FROM (SELECT) AS one LEFT JOIN recorded ON true ORDER BY recorded.seq
"""


def _freeing(turn: str) -> str:
    """The CTEs of a turn's end that free the steers offered to the running turn ``turn``
    (a CTE of its id) and never taken (``freed``, ``unoffered``), and find the next turn's
    prompt (``following``): the first input then waiting to be a turn."""
    return f"""freed AS (
    SELECT i.seq, i.id FROM steerable_inputs i, {turn}
    WHERE i.session = $1 AND i.state = 'waiting' AND i.turn = {turn}.id
), unoffered AS (
    UPDATE steerable_inputs i SET turn = NULL
    WHERE i.session = $1 AND i.seq IN (SELECT seq FROM freed)
), following AS (
    SELECT q.id FROM (
        SELECT i.seq, i.id FROM steerable_inputs i
        WHERE i.session = $1 AND i.state = 'waiting' AND i.turn IS NULL
            AND EXISTS (SELECT FROM {turn})
        UNION ALL
        SELECT seq, id FROM freed
    ) AS q ORDER BY q.seq LIMIT 1"""


# $4 state, $5 answer, $6 error (both json.dumps text), $7 usage (JSON text). The steers
# offered and never taken wait again, each a turn of its own in its place (the event lists
# them as `released`); the next turn's prompt is the first of the inputs then waiting to be
# one.
_END_TURN = f"""
WITH {LOCKED}, {_HELD}, stored AS (
    SELECT coalesce(max(position) + 1, 0) AS n FROM steerable_messages WHERE session = $1
), ended AS (
    UPDATE steerable_turns t SET state = $4, answer = $5, error = $6, end_position = stored.n,
        usage = $7, ended_at = now()
    FROM held, stored WHERE t.session = $1 AND t.id = held.id
), {_freeing("held")}
), logged AS (
    INSERT INTO steerable_events (session, id, kind, turn, data)
    SELECT $1, held.events + 1, 'turn_ended', held.id, json_build_object(
        'state', $4::text,
        'released', coalesce((SELECT json_agg(id ORDER BY seq) FROM freed), '[]'::json)
    )::text
    FROM held
), released AS (
    UPDATE steerable_sessions s SET version = s.version + 1, running = NULL, holder = NULL,
        expires = '-infinity', events = s.events + 1,
        queued = s.queued + (SELECT count(*) FROM freed)
    FROM held WHERE s.session = $1
), hinted AS (
    SELECT {hint("work")} FROM following
)
SELECT {FLAGS}, EXISTS (SELECT FROM held) AS holds, (SELECT id FROM following) AS following,
    (SELECT count(*) FROM hinted) AS hints
"""

# The end of a turn with its last save (`end_turn(last=...)`): $8 at, $9..$12 the messages'
# ids, bodies, roles and steered flags, appended at $8 as `_STEP` appends a final save with
# take 0 (no steer taken, no `step`), then the turn ended as `_END_TURN` ends it, where the
# messages end. One statement updates a row once, so the turn's row and the session's row
# are each one UPDATE for both halves; the events are the messages' then `turn_ended`.
_END_WITH_LAST = f"""
WITH {LOCKED}, {_HELD}, stored AS (
    SELECT coalesce(max(position) + 1, 0) AS n FROM steerable_messages WHERE session = $1
), ok AS (
    SELECT held.*, stored.n FROM held, stored WHERE stored.n = $8::bigint
), new AS (
    SELECT m.i - 1 AS i, m.id, m.body, m.role, m.steered
    FROM unnest($9::text[], $10::text[], $11::text[], $12::boolean[])
        WITH ORDINALITY AS m (id, body, role, steered, i)
), written AS (
    INSERT INTO steerable_messages (session, position, id, body)
    SELECT $1, ok.n + new.i, new.id, new.body FROM ok, new ORDER BY new.i
), ended AS (
    UPDATE steerable_turns t SET state = $4, answer = $5, error = $6,
        end_position = ok.n + cardinality($9::text[]), usage = $7, ended_at = now()
    FROM ok WHERE t.session = $1 AND t.id = ok.id
), {_freeing("ok")}
), ev AS (
    SELECT new.i, 'message' AS kind, json_build_object('position', ok.n + new.i,
        'id', new.id, 'role', new.role, 'steered', new.steered)::text AS data
    FROM ok, new
    UNION ALL
    SELECT cardinality($9::text[]), 'turn_ended', json_build_object(
        'state', $4::text,
        'released', coalesce((SELECT json_agg(id ORDER BY seq) FROM freed), '[]'::json)
    )::text
    FROM ok
), logged AS (
    INSERT INTO steerable_events (session, id, kind, turn, data)
    SELECT $1, ok.events + 1 + ev.i, ev.kind, ok.id, ev.data FROM ok, ev
), released AS (
    UPDATE steerable_sessions s SET version = s.version + 1, running = NULL, holder = NULL,
        expires = '-infinity', events = s.events + (SELECT count(*) FROM ev),
        queued = s.queued + (SELECT count(*) FROM freed)
    FROM ok WHERE s.session = $1
), hinted AS (
    SELECT {hint("work")} FROM following
)
SELECT {FLAGS}, EXISTS (SELECT FROM held) AS holds, (SELECT n FROM stored) AS n,
    (SELECT id FROM following) AS following, (SELECT count(*) FROM hinted) AS hints
"""

# A stop asked twice is recorded once, and hinted each time (as the memory reference does).
_STOP = f"""
WITH {LOCKED}, run AS (
    SELECT fresh.events, t.id, t.stop_requested
    FROM fresh JOIN steerable_turns t ON t.session = fresh.session AND t.id = fresh.running
), asked AS (
    UPDATE steerable_turns t SET stop_requested = true
    FROM run WHERE NOT run.stop_requested AND t.session = $1 AND t.id = run.id
), logged AS (
    INSERT INTO steerable_events (session, id, kind, turn, data)
    SELECT $1, run.events + 1, 'stop', run.id, '{{}}' FROM run WHERE NOT run.stop_requested
), counted AS (
    UPDATE steerable_sessions s SET version = s.version + 1, events = s.events + 1
    FROM run WHERE NOT run.stop_requested AND s.session = $1
), hinted AS (
    SELECT {hint("stop")} FROM run
)
SELECT {FLAGS}, (SELECT id FROM run) AS turn, (SELECT count(*) FROM hinted) AS hints
"""


class PostgresServiceTables(PostgresServiceViews, PostgresCancel, PostgresHints):
    """The :class:`steerable.service_store.ServiceStore` verbs of :class:`PostgresStore`.

    Round trips: every verb is one statement, so one trip, but for a session's first input
    (three: the statement finds no row, one insert makes it, the statement again) and for
    a statement that lost a race to a writer that committed while it waited on the lock
    (run again). A ``step`` nobody steered is one trip, like one that takes steers; an
    ``enqueue`` with conditions is one trip, like one without; an ``end_turn`` with the
    turn's ``last`` messages is one trip, like one without (a save refused by a unique key
    of the transcript reads its length once more, as ``step`` does, to say why); a ``claim``
    that makes the new turn's first step (``first``) is one trip, like one that does not.
    """

    __slots__ = ()

    # -- writes ----------------------------------------------------------------------------

    async def enqueue(
        self,
        session: str,
        input: Input,
        *,
        if_idle: bool = False,
        expected_turn: str | None = None,
        max_waiting: int | None = None,
    ) -> Accepted:
        """Record ``input`` in the session's order of arrival; an id seen before is a no-op.

        Refused whole, nothing recorded: :class:`SessionNotIdle`, :class:`TurnMismatch`,
        :class:`QueueFull` (see the Protocol), checked in the statement that would record it.
        """

        def unknown() -> None:
            # a session with no row has no turn and no input: refuse before making its row
            refused = _refused_when_empty(if_idle, expected_turn, max_waiting)
            if refused is not None:
                raise _refusal(session, refused, expected_turn, max_waiting, None, 0, None)

        [row] = await self._write(
            f"enqueue an input for session {session!r}",
            _ENQUEUE,
            session,
            input.id,
            input.kind,
            codec.encode(input.message(steered=True)),
            object_text(input.metadata),
            if_idle,
            expected_turn,
            max_waiting,
            object_text(input.trace),
            create=True,
            unknown=unknown,
        )
        if row["seen_seq"] is not None:
            kind = row["seen_kind"]
            return Accepted(
                input.id, kind, row["seen_seq"], row["seen_offered"], row["seen_ahead"], True
            )
        if row["refused"] is not None:
            raise _refusal(
                session,
                row["refused"],
                expected_turn,
                max_waiting,
                row["running"],
                row["waiting"],
                row["would"],
            )
        return Accepted(input.id, input.kind, row["seq"], row["offered"], row["ahead"])

    async def claim(
        self,
        holder: str,
        *,
        seconds: float,
        cap: int,
        session: str | None = None,
        known: Mapping[str, Known] | None = None,
        first: bool = False,
    ) -> Claim | None:
        """Claim one session with work and no live lease (``session`` only, if given),
        leaving out the messages the claimer knows under the transcript's mark, and make a
        new turn's first step in the same statement if ``first`` (:mod:`._first`)."""
        held = list((known or {}).items())
        args: tuple[Any, ...] = (
            holder,
            seconds,
            cap,
            [name for name, _ in held],
            [k.length for _, k in held],
            [k.mark for _, k in held],
        )
        query = _CLAIMS[session is not None, first]
        if session is not None:
            args = (*args, session)
        row = await self._claimed(query, args)
        if row["session"] is None:
            return None
        name: str = row["session"]
        where = f"session {name!r}"
        prompt = codec.decode(row["id"], row["body"], where=f"{where}, input {row['id']!r}")
        skip: int = row["skip"]
        messages = [
            codec.decode(id, body, where=f"{where}, position {position}")
            for position, (id, body) in enumerate(
                zip(row["ids"] or (), row["bodies"] or (), strict=True), start=skip
            )
        ]
        return Claim(
            Lease(name, holder, row["epoch"], row["expires"]),
            row["id"],
            Input(
                row["kind"],
                prompt.text,
                row["id"],
                json_object(row["metadata"]),
                json_object(row["trace"]),
            ),
            row["start"],
            messages,
            row["resumed"],
            row["steps"],
            row["steers_taken"],
            row["cap"],
            row["stop_requested"],
            row["previous_holder"],
            row["mark"],
            skip,
            _taken(row, where) if first else None,
        )

    async def _claimed(self, query: str, args: tuple[Any, ...]) -> Any:
        """The row of a claim statement, run again when a message a plain save committed
        after its snapshot took a key its first step writes (it failed whole)."""
        for _ in range(RETRIES):
            try:
                [row] = await self._write("claim a session", query, *args)
            except asyncpg.UniqueViolationError as exc:
                if exc.constraint_name not in _TRANSCRIPT_KEYS:
                    raise
                continue
            return row
        raise StoreUnavailable(
            f"cannot claim a session: the transcript grew under each of {RETRIES} attempts"
        )

    async def renew(self, lease: Lease, *, seconds: float) -> Renewal:
        """Extend ``lease`` by ``seconds`` from now; :class:`Fenced` if it is stale."""
        [row] = await self._write(
            f"renew the lease of session {lease.session!r}",
            _RENEW,
            lease.session,
            lease.epoch,
            lease.holder,
            seconds,
        )
        if row["expires"] is None:
            raise Fenced(lease.session, lease.epoch, row["epoch"])
        new = Lease(lease.session, lease.holder, lease.epoch, row["expires"])
        return Renewal(new, row["stop_requested"])

    async def step(
        self,
        lease: Lease,
        messages: Sequence[Message],
        *,
        at: int,
        take: int,
        final: bool = False,
    ) -> list[Message]:
        """The turn's save-and-take, fenced by ``lease``; returns the steered messages taken.

        One statement, so one round trip whether or not a steer waits (see the class).
        """
        session = lease.session
        bodies = [codec.encode(m) for m in messages]
        args = (
            session,
            lease.epoch,
            lease.holder,
            at,
            take,
            int(counts_as_step(messages, take, final=final)),
            [m.id for m in messages],
            bodies,
            [m.role for m in messages],
            [m.steered for m in messages],
        )
        doing = f"save a step of session {session!r}"
        try:
            rows = await self._write(doing, _STEP, *args)
        except asyncpg.UniqueViolationError as exc:
            stored = await self._stored(session)
            if exc.constraint_name == _POSITION_KEY or stored != at:
                raise TranscriptConflict(session, at, stored) from None
            raise InvalidMessage(
                f"session {session!r}: a message id is already in the transcript"
                f" ({exc.detail or exc})"
            ) from None
        head = rows[0]
        if not head["holds"]:
            raise Fenced(session, lease.epoch, head["epoch"])
        if head["n"] != at:
            raise TranscriptConflict(session, at, head["n"])
        return [
            codec.decode(id, body, where=f"session {session!r}, input {id!r}")
            for id, body in ((r["id"], r["body"]) for r in rows)
            if id is not None
        ]

    async def _stored(self, session: str) -> int:
        rows = await self._fetch(
            f"read the length of session {session!r}",
            "SELECT coalesce(max(position) + 1, 0) FROM steerable_messages WHERE session = $1",
            session,
        )
        length: int = rows[0][0]
        return length

    async def end_turn(
        self,
        lease: Lease,
        outcome: Outcome,
        *,
        last: Sequence[Message] = (),
        at: int | None = None,
    ) -> str | None:
        """Record the turn's end and release the lease; the next turn's prompt id, if any.

        ``last``: saved at ``at`` first, as a final ``step`` taking nothing would, in the same
        statement (refused whole with the end), so one round trip either way (see the class).
        """
        session = lease.session
        error = None if outcome.error is None else json.dumps(outcome.error)
        ending = (
            session,
            lease.epoch,
            lease.holder,
            outcome.state,
            json.dumps(outcome.text),
            error,
            object_text(outcome.usage),
        )
        doing = f"end the turn of session {session!r}"
        if not last:
            [row] = await self._write(doing, _END_TURN, *ending)
        else:
            if at is None:
                raise UsageError(f"cannot {doing}: end_turn(last=...) needs at=")
            bodies = [codec.encode(m) for m in last]
            saved = (
                [m.id for m in last],
                bodies,
                [m.role for m in last],
                [m.steered for m in last],
            )
            try:
                [row] = await self._write(doing, _END_WITH_LAST, *ending, at, *saved)
            except asyncpg.UniqueViolationError as exc:
                raise await self._refused_save(session, at, exc) from None
            if row["holds"] and row["n"] != at:
                raise TranscriptConflict(session, at, row["n"])
        if not row["holds"]:
            raise Fenced(session, lease.epoch, row["epoch"])
        following: str | None = row["following"]
        return following

    async def _refused_save(
        self, session: str, at: int, exc: asyncpg.UniqueViolationError
    ) -> TranscriptConflict | InvalidMessage:
        """The refusal of a save at ``at`` a unique key of the transcript stopped: a race
        for the position (or a stale ``at``), else an id already stored."""
        stored = await self._stored(session)
        if exc.constraint_name == _POSITION_KEY or stored != at:
            return TranscriptConflict(session, at, stored)
        return InvalidMessage(
            f"session {session!r}: a message id is already in the transcript ({exc.detail or exc})"
        )

    async def stop(self, session: str) -> str | None:
        """Ask the running turn to stop; its id, or None when no turn runs."""
        [row] = await self._write(f"stop the turn of session {session!r}", _STOP, session)
        turn: str | None = row["turn"] if row["known"] else None
        return turn


def _taken(row: Any, where: str) -> list[Message] | None:
    """The steered messages a claim's first step took (None: it made no step)."""
    if not row["stepped"]:
        return None
    return [
        codec.decode(id, body, where=f"{where}, input {id!r}")
        for id, body in zip(row["taken_ids"] or (), row["taken_bodies"] or (), strict=True)
    ]


def _refused_when_empty(
    if_idle: bool, expected_turn: str | None, max_waiting: int | None
) -> str | None:
    """The statement's ``refused`` for a session with nothing running or waiting."""
    if expected_turn is not None:
        return "mismatch"  # nothing to offer a steer to
    if max_waiting is not None and max_waiting <= 0:
        return "full"
    return None


def _refusal(
    session: str,
    refused: str,
    expected_turn: str | None,
    max_waiting: int | None,
    running: str | None,
    waiting: int,
    would: str | None,
) -> SessionNotIdle | TurnMismatch | QueueFull:
    """The error of an enqueue the statement refused (``refused``: which condition)."""
    if refused == "not idle":
        return SessionNotIdle(session, running, waiting)
    if refused == "mismatch":
        return TurnMismatch(session, expected_turn or "", would)
    return QueueFull(session, max_waiting or 0)
