"""The Postgres store's service tables: every write is one statement, fenced inside it.

Each write (``enqueue``, ``claim``, ``renew``, ``step``, ``end_turn``, ``stop``) is one SQL
statement of data-modifying CTEs, so one implicit transaction and one round trip once
asyncpg has prepared it. It starts by locking the session's row of ``steerable_sessions``
(``SELECT ... FOR UPDATE``): every write of a session queues on that lock, so the checks
(fencing by epoch and holder, the transcript's length, which steers were offered) and the
writes that follow them are one atomic step, and a write refused is refused whole.

One statement reads one snapshot, taken when it starts, before it waits for the lock, while
the lock returns the row as the last writer left it (READ COMMITTED follows a locked row to
its newest version). So the row carries ``version``, which every write but a renewal grows:
a statement whose snapshot saw a different version than the lock returned read tables a
writer has changed since, writes nothing and runs again on a fresh snapshot (a renewal
changes only the expiry, which the statements read from the locked row). Each rerun means
another writer committed, so the store as a whole moves on.

A lease expires on the server's clock: ``now()`` (the statement's start there), also in a
claim's test for a live lease, and ``expires_at`` is its seconds since the Unix epoch.
A claim of one session waits for its lock, then finds the lease its winner took; a claim
of any session takes the first with work under ``FOR UPDATE SKIP LOCKED`` from the partial
index of sessions with work, so claimers pass each other instead of queueing.

Writes that make work claimable (an input while no turn runs, a turn's end with an input
waiting) and ``stop`` call ``pg_notify`` on the channel ``steerable`` inside the statement,
delivered when it commits; :meth:`PostgresServiceTables.hints` listens on one connection.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from typing import TYPE_CHECKING, Any, Final

import asyncpg  # type: ignore[import-untyped]

from steerable import codec
from steerable.errors import (
    Fenced,
    InvalidMessage,
    StoreUnavailable,
    TranscriptConflict,
    UsageError,
)
from steerable.messages import Message
from steerable.service_store import (
    Accepted,
    Claim,
    Entry,
    Hint,
    Input,
    InputView,
    Lease,
    Outcome,
    Renewal,
    ServiceEvent,
    SessionState,
    SessionSummary,
    Status,
    TurnView,
    counts_as_step,
    listing,
)
from steerable.stores.postgres._translate import translated

if TYPE_CHECKING:
    from steerable.stores.postgres._store import Pool

__all__ = ["CHANNEL", "PostgresServiceTables"]

CHANNEL: Final = "steerable"
"""The ``LISTEN`` channel of the hints; a payload is JSON ``{"kind", "session"}``."""

# How often a statement runs again when its snapshot is older than the row it locked (or the
# server rolled it back for a deadlock or, at REPEATABLE READ, for that same change); each
# rerun means another writer committed.
_RETRIES = 64

_POSITION_KEY = "steerable_messages_position"

# The session's row locked, and `fresh` only when the snapshot saw the version locked.
_LOCKED = """
locked AS (
    SELECT * FROM steerable_sessions WHERE session = $1 FOR UPDATE
), fresh AS (
    SELECT locked.* FROM locked JOIN steerable_sessions snap USING (session)
    WHERE snap.version = locked.version
)"""

# The flags every write returns first: the session has a row; the snapshot is current.
_FLAGS = """EXISTS (SELECT FROM locked) AS known, EXISTS (SELECT FROM fresh) AS fresh,
    (SELECT epoch FROM locked) AS epoch"""


def _hint(kind: str) -> str:
    return f"pg_notify('{CHANNEL}', json_build_object('kind', '{kind}', 'session', $1::text)::text)"


# $1 session, $2 id, $3 kind, $4 body. A steer is offered to the running turn when it is not
# stopping and was offered fewer than its cap; anything else waits to be a turn of its own.
_ENQUEUE = f"""
WITH {_LOCKED}, seen AS (
    SELECT kind, seq, offered, ahead FROM steerable_inputs WHERE session = $1 AND id = $2
), run AS (
    SELECT t.id, t.cap, t.offered, t.stop_requested
    FROM fresh JOIN steerable_turns t ON t.session = fresh.session AND t.id = fresh.running
), place AS (
    SELECT fresh.inputs + 1 AS seq, fresh.events + 1 AS event, fresh.queued,
        run.id IS NOT NULL AS busy,
        CASE WHEN $3 = 'steer' AND NOT run.stop_requested AND run.offered < run.cap
            THEN run.id END AS offered
    FROM fresh LEFT JOIN run ON true
    WHERE NOT EXISTS (SELECT FROM seen)
), answer AS (
    SELECT place.*, CASE WHEN offered IS NULL THEN busy::int + queued ELSE 0 END AS ahead
    FROM place
), added AS (
    INSERT INTO steerable_inputs (session, seq, id, kind, body, offered, ahead, turn)
    SELECT $1, seq, $2, $3, $4, offered, ahead, offered FROM answer
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
    SELECT {_hint("work")} FROM answer WHERE NOT busy
)
SELECT {_FLAGS}, (SELECT count(*) FROM hinted) AS hints,
    seen.kind AS seen_kind, seen.seq AS seen_seq, seen.offered AS seen_offered,
    seen.ahead AS seen_ahead, answer.seq, answer.offered, answer.ahead
FROM (SELECT) AS one LEFT JOIN seen ON true LEFT JOIN answer ON true
"""

_NEW_SESSION = "INSERT INTO steerable_sessions (session) VALUES ($1) ON CONFLICT DO NOTHING"

# The lock of a claim: one session (waiting for its lock), or any with work (skipping the
# locked ones), that has no live lease. $1 holder, $2 seconds, $3 cap, $4 session.
_CLAIM_ONE = """
locked AS (
    SELECT * FROM steerable_sessions
    WHERE session = $4 AND (running IS NOT NULL OR queued > 0) AND expires <= now()
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
# turn. It returns the transcript too (from the same snapshot), so a claim is one trip.
_CLAIM = """
WITH {locked}, fresh AS (
    SELECT locked.* FROM locked JOIN steerable_sessions snap USING (session)
    WHERE snap.version = locked.version
), prompt AS (
    SELECT i.seq, i.id FROM fresh JOIN steerable_inputs i ON i.session = fresh.session
    WHERE fresh.running IS NULL AND i.state = 'waiting' AND i.turn IS NULL
    ORDER BY i.seq LIMIT 1
), stored AS (
    SELECT coalesce(max(m.position) + 1, 0) AS n FROM steerable_messages m
    WHERE m.session = (SELECT session FROM fresh)
), turn AS (
    SELECT t.id, t.start_position AS start, t.cap, t.steps, t.steers_taken, t.stop_requested,
        true AS resumed
    FROM fresh JOIN steerable_turns t ON t.session = fresh.session AND t.id = fresh.running
    UNION ALL
    SELECT prompt.id, stored.n, $3::bigint, 0, 0, false, false FROM prompt, stored
), began AS (
    INSERT INTO steerable_turns (session, id, began, start_position, cap, state, epoch)
    SELECT fresh.session, turn.id, fresh.epoch + 1, turn.start, turn.cap, 'running',
        fresh.epoch + 1
    FROM fresh, turn WHERE NOT turn.resumed
), prompted AS (
    UPDATE steerable_inputs i SET state = 'prompt', turn = i.id
    FROM fresh, prompt WHERE i.session = fresh.session AND i.seq = prompt.seq
), retaken AS (
    UPDATE steerable_turns t SET epoch = fresh.epoch + 1
    FROM fresh, turn WHERE turn.resumed AND t.session = fresh.session AND t.id = turn.id
), ev AS (
    SELECT 1 AS k, 'holder' AS kind,
        json_build_object('holder', $1::text, 'epoch', fresh.epoch + 1)::text AS data
    FROM fresh, turn WHERE turn.resumed
    UNION ALL
    SELECT 2, 'turn_started', json_build_object(
        'epoch', fresh.epoch + 1, 'holder', $1::text, 'resumed', turn.resumed)::text
    FROM fresh, turn
), logged AS (
    INSERT INTO steerable_events (session, id, kind, turn, data)
    SELECT fresh.session, fresh.events + row_number() OVER (ORDER BY ev.k), ev.kind, turn.id,
        ev.data
    FROM fresh, turn, ev
), held AS (
    UPDATE steerable_sessions s SET version = s.version + 1, epoch = s.epoch + 1, holder = $1,
        expires = now() + make_interval(secs => $2), running = turn.id,
        queued = s.queued - (NOT turn.resumed)::int,
        events = s.events + (SELECT count(*) FROM ev)
    FROM fresh, turn WHERE s.session = fresh.session
    RETURNING s.session, s.epoch, extract(epoch FROM s.expires)::float8 AS expires
)
SELECT EXISTS (SELECT FROM locked) AS known, EXISTS (SELECT FROM fresh) AS fresh,
    held.session, held.epoch, held.expires, turn.*, i.kind, i.body,
    (SELECT array_agg(m.id ORDER BY m.position) FROM steerable_messages m
        WHERE m.session = held.session) AS ids,
    (SELECT array_agg(m.body ORDER BY m.position) FROM steerable_messages m
        WHERE m.session = held.session) AS bodies
FROM (SELECT) AS one LEFT JOIN held ON true LEFT JOIN turn ON true
    LEFT JOIN steerable_inputs i ON i.session = held.session AND i.id = turn.id
"""

# The running turn of a lease that still holds the session: $2 epoch, $3 holder.
_HELD = """held AS (
    SELECT fresh.session, fresh.events, t.id, t.cap, t.steps, t.steers_taken, t.stop_requested
    FROM fresh JOIN steerable_turns t ON t.session = fresh.session AND t.id = fresh.running
    WHERE fresh.epoch = $2 AND fresh.holder = $3
)"""

# $4 seconds. The version stays: a renewal changes only the expiry.
_RENEW = f"""
WITH {_LOCKED}, {_HELD}, renewed AS (
    UPDATE steerable_sessions s SET expires = now() + make_interval(secs => $4)
    FROM held WHERE s.session = held.session
    RETURNING extract(epoch FROM s.expires)::float8 AS expires
)
SELECT {_FLAGS}, (SELECT expires FROM renewed) AS expires,
    (SELECT stop_requested FROM held) AS stop_requested
"""

# The save-and-take of a holder: $4 at, $5 take, $6 1 when the save is a step (else 0),
# $7..$10 the messages' ids, bodies, roles and steered flags. The events go in the memory
# reference's order (phase, then position): the messages saved, `steers_taken`, the steers
# recorded, `step`. A steer already in the transcript (or in this save) is taken, not
# recorded again. The transcript's length is max(position) on the key, never a full read.
_STEP = f"""
WITH {_LOCKED}, {_HELD}, stored AS (
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
SELECT {_FLAGS}, EXISTS (SELECT FROM held) AS holds, (SELECT n FROM stored) AS n,
    recorded.id, recorded.body
FROM (SELECT) AS one LEFT JOIN recorded ON true ORDER BY recorded.seq
"""

# $4 state, $5 answer, $6 error (both json.dumps text). The steers offered and never taken
# wait again, each a turn of its own in its place; the next turn's prompt is the first of
# the inputs then waiting to be one.
_END_TURN = f"""
WITH {_LOCKED}, {_HELD}, stored AS (
    SELECT coalesce(max(position) + 1, 0) AS n FROM steerable_messages WHERE session = $1
), ended AS (
    UPDATE steerable_turns t SET state = $4, answer = $5, error = $6, end_position = stored.n
    FROM held, stored WHERE t.session = $1 AND t.id = held.id
), freed AS (
    SELECT i.seq, i.id FROM steerable_inputs i, held
    WHERE i.session = $1 AND i.state = 'waiting' AND i.turn = held.id
), unoffered AS (
    UPDATE steerable_inputs i SET turn = NULL
    WHERE i.session = $1 AND i.seq IN (SELECT seq FROM freed)
), following AS (
    SELECT q.id FROM (
        SELECT i.seq, i.id FROM steerable_inputs i
        WHERE i.session = $1 AND i.state = 'waiting' AND i.turn IS NULL
            AND EXISTS (SELECT FROM held)
        UNION ALL
        SELECT seq, id FROM freed
    ) AS q ORDER BY q.seq LIMIT 1
), logged AS (
    INSERT INTO steerable_events (session, id, kind, turn, data)
    SELECT $1, held.events + 1, 'turn_ended', held.id,
        json_build_object('state', $4::text)::text
    FROM held
), released AS (
    UPDATE steerable_sessions s SET version = s.version + 1, running = NULL, holder = NULL,
        expires = '-infinity', events = s.events + 1,
        queued = s.queued + (SELECT count(*) FROM freed)
    FROM held WHERE s.session = $1
), hinted AS (
    SELECT {_hint("work")} FROM following
)
SELECT {_FLAGS}, EXISTS (SELECT FROM held) AS holds, (SELECT id FROM following) AS following,
    (SELECT count(*) FROM hinted) AS hints
"""

# A stop asked twice is recorded once, and hinted each time (as the memory reference does).
_STOP = f"""
WITH {_LOCKED}, run AS (
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
    SELECT {_hint("stop")} FROM run
)
SELECT {_FLAGS}, (SELECT id FROM run) AS turn, (SELECT count(*) FROM hinted) AS hints
"""

# A turn as TurnView has it: the lease's holder and expiry only while it runs.
_TURN_VIEW = """t.id AS turn_id, t.state AS turn_state,
    CASE WHEN t.id = s.running THEN s.holder END AS holder, t.epoch,
    CASE WHEN t.id = s.running AND s.holder IS NOT NULL
        THEN extract(epoch FROM s.expires)::float8 END AS expires,
    t.steps, t.steers_taken, t.stop_requested, t.start_position, t.end_position, t.answer,
    t.error"""

_INPUT_VIEW = "i.id, i.kind, i.body, i.seq, i.state, i.turn, i.step"

_STATUS = f"""
SELECT {_TURN_VIEW}, {_INPUT_VIEW}
FROM (SELECT) AS one
    LEFT JOIN steerable_sessions s ON s.session = $1
    LEFT JOIN steerable_turns t ON t.session = $1 AND t.id = s.running
    LEFT JOIN steerable_inputs i ON i.session = $1 AND i.state = 'waiting'
ORDER BY i.seq
"""

_INPUT = f"SELECT {_INPUT_VIEW} FROM steerable_inputs i WHERE i.session = $1 AND i.id = $2"

_TURN = f"""
SELECT {_TURN_VIEW}, i.state AS input_state, i.turn AS input_turn
FROM (SELECT) AS one
    LEFT JOIN steerable_sessions s ON s.session = $1
    LEFT JOIN steerable_turns t ON t.session = $1 AND t.id = $2
    LEFT JOIN steerable_inputs i ON i.session = $1 AND i.id = $2
"""

# The turn of a message: the last claimed of the turns that started at or before it.
_TRANSCRIPT = """
SELECT m.position, m.id, m.body, (
    SELECT t.id FROM steerable_turns t WHERE t.session = $1 AND t.start_position <= m.position
    ORDER BY t.start_position DESC, t.began DESC LIMIT 1
) AS turn
FROM steerable_messages m WHERE m.session = $1 AND m.position > $2
ORDER BY m.position LIMIT greatest($3::bigint, 0)
"""

_EVENTS = """
SELECT id, kind, turn, data, extract(epoch FROM at)::float8 AS at FROM steerable_events
WHERE session = $1 AND id > $2 ORDER BY id LIMIT greatest($3::bigint, 0)
"""

# A listing: a range of the code-point index of step 3 (the bounds are filled in), the
# state filter before the LIMIT, and the last event's time by one lookup on the events' key.
_SESSIONS = """
SELECT s.session, s.running, s.queued, extract(epoch FROM e.at)::float8 AS at
FROM steerable_sessions s
    LEFT JOIN steerable_events e ON e.session = s.session AND e.id = s.events
WHERE {bounds} AND s.inputs > 0{state}
ORDER BY s.session COLLATE "C" LIMIT greatest($1::bigint, 0)
"""

_STATE_FILTER: dict[SessionState | None, str] = {
    None: "",
    "running": " AND s.running IS NOT NULL",
    "queued": " AND s.running IS NULL AND s.queued > 0",
    "idle": " AND s.running IS NULL AND s.queued = 0",
}


def _listing(prefix: str, after: str | None, state: SessionState | None) -> tuple[str, list[str]]:
    """The statement of a listing and its bounds (``$2``, ``$3``; ``$1`` is the limit)."""
    lower, included, upper = listing(prefix, after)
    bounds = f's.session COLLATE "C" {">=" if included else ">"} $2'
    if upper is not None:
        bounds += ' AND s.session COLLATE "C" < $3'
    args = [lower] if upper is None else [lower, upper]
    return _SESSIONS.format(bounds=bounds, state=_STATE_FILTER[state]), args


class PostgresServiceTables:
    """The :class:`steerable.service_store.ServiceStore` verbs of :class:`PostgresStore`.

    Round trips: every verb is one statement, so one trip, but for a session's first input
    (three: the statement finds no row, one insert makes it, the statement again) and for
    a statement that lost a race to a writer that committed while it waited on the lock
    (run again). A ``step`` nobody steered is one trip, like one that takes steers.
    """

    __slots__ = ()

    pool: Pool

    async def _check_once(self) -> None:
        raise NotImplementedError  # provided by PostgresStore

    async def _fetch(self, doing: str, query: str, *args: Any) -> list[Any]:
        await self._check_once()
        with translated(doing):
            rows: list[Any] = await self.pool.fetch(query, *args)
        return rows

    async def _write(self, doing: str, query: str, *args: Any, create: bool = False) -> list[Any]:
        """The rows of a locking write, run until its snapshot was current.

        ``create`` makes the session's row when it has none (an ``enqueue``); otherwise a
        session without one answers ``known`` false and nothing is written. A unique key
        that fires is raised as it is (``asyncpg.UniqueViolationError``) for ``step`` to
        tell a conflict from a duplicate id.
        """
        await self._check_once()
        for _ in range(_RETRIES):
            unique: asyncpg.UniqueViolationError | None = None
            with translated(doing):
                try:
                    rows: list[Any] = await self.pool.fetch(query, *args)
                except (asyncpg.DeadlockDetectedError, asyncpg.SerializationError):
                    # rolled back whole: run it again as it is (the second is REPEATABLE
                    # READ's answer to a row changed since the snapshot, for the same rerun)
                    continue
                except asyncpg.UniqueViolationError as exc:
                    unique = exc
            if unique is not None:
                raise unique
            if not rows[0]["known"] and create:
                # (at REPEATABLE READ a racer's row refuses the insert: it is made either way)
                with translated(doing), suppress(asyncpg.SerializationError):
                    await self.pool.execute(_NEW_SESSION, args[0])
                continue
            if not rows[0]["known"] or rows[0]["fresh"]:
                return rows
        raise StoreUnavailable(
            f"cannot {doing}: the session changed under each of {_RETRIES} attempts"
        )

    # -- writes ----------------------------------------------------------------------------

    async def enqueue(self, session: str, input: Input) -> Accepted:
        """Record ``input`` in the session's order of arrival; an id seen before is a no-op."""
        body = codec.encode(input.message(steered=True))
        [row] = await self._write(
            f"enqueue an input for session {session!r}",
            _ENQUEUE,
            session,
            input.id,
            input.kind,
            body,
            create=True,
        )
        if row["seen_seq"] is not None:
            kind = row["seen_kind"]
            return Accepted(
                input.id, kind, row["seen_seq"], row["seen_offered"], row["seen_ahead"], True
            )
        return Accepted(input.id, input.kind, row["seq"], row["offered"], row["ahead"])

    async def claim(
        self, holder: str, *, seconds: float, cap: int, session: str | None = None
    ) -> Claim | None:
        """Claim one session with work and no live lease (``session`` only, if given)."""
        args: tuple[Any, ...]
        if session is None:
            query, args = _CLAIM.format(locked=_CLAIM_ANY), (holder, seconds, cap)
        else:
            query, args = _CLAIM.format(locked=_CLAIM_ONE), (holder, seconds, cap, session)
        [row] = await self._write("claim a session", query, *args)
        if row["session"] is None:
            return None
        name: str = row["session"]
        where = f"session {name!r}"
        prompt = codec.decode(row["id"], row["body"], where=f"{where}, input {row['id']!r}")
        messages = [
            codec.decode(id, body, where=f"{where}, position {position}")
            for position, (id, body) in enumerate(
                zip(row["ids"] or (), row["bodies"] or (), strict=True)
            )
        ]
        return Claim(
            Lease(name, holder, row["epoch"], row["expires"]),
            row["id"],
            Input(row["kind"], prompt.text, row["id"]),
            row["start"],
            messages,
            row["resumed"],
            row["steps"],
            row["steers_taken"],
            row["cap"],
            row["stop_requested"],
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
        self, lease: Lease, messages: Sequence[Message], *, at: int, take: int
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
            int(counts_as_step(messages, take)),
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

    async def end_turn(self, lease: Lease, outcome: Outcome) -> str | None:
        """Record the turn's end and release the lease; the next turn's prompt id, if any."""
        error = None if outcome.error is None else json.dumps(outcome.error)
        [row] = await self._write(
            f"end the turn of session {lease.session!r}",
            _END_TURN,
            lease.session,
            lease.epoch,
            lease.holder,
            outcome.state,
            json.dumps(outcome.text),
            error,
        )
        if not row["holds"]:
            raise Fenced(lease.session, lease.epoch, row["epoch"])
        following: str | None = row["following"]
        return following

    async def stop(self, session: str) -> str | None:
        """Ask the running turn to stop; its id, or None when no turn runs."""
        [row] = await self._write(f"stop the turn of session {session!r}", _STOP, session)
        turn: str | None = row["turn"] if row["known"] else None
        return turn

    # -- reads -----------------------------------------------------------------------------

    async def status(self, session: str) -> Status:
        """The session's running turn, waiting inputs and queue length."""
        rows = await self._fetch(f"read the status of session {session!r}", _STATUS, session)
        running = _turn_view(rows[0]) if rows[0]["turn_id"] is not None else None
        waiting = [_input_view(session, r) for r in rows if r["id"] is not None]
        return Status(session, running, waiting, sum(i.turn is None for i in waiting))

    async def input(self, session: str, id: str) -> InputView | None:
        """The input ``id`` and its fate, or None if the session never had it."""
        rows = await self._fetch(f"read an input of session {session!r}", _INPUT, session, id)
        return _input_view(session, rows[0]) if rows else None

    async def turn(self, session: str, id: str) -> TurnView | None:
        """The turn ``id`` (``queued`` while its prompt waits), or None if there is none."""
        [row] = await self._fetch(f"read a turn of session {session!r}", _TURN, session, id)
        if row["turn_id"] is not None:
            return _turn_view(row)
        if row["input_state"] == "waiting" and row["input_turn"] is None:
            return TurnView(id, "queued")
        return None

    async def transcript(self, session: str, *, after: int, limit: int) -> list[Entry]:
        """Up to ``limit`` messages at positions > ``after`` (-1: from the start), with turns."""
        rows = await self._fetch(
            f"read the transcript of session {session!r}", _TRANSCRIPT, session, after, limit
        )
        return [
            Entry(
                position,
                codec.decode(id, body, where=f"session {session!r}, position {position}"),
                turn,
            )
            for position, id, body, turn in rows
        ]

    async def events(self, session: str, *, after: int, limit: int) -> list[ServiceEvent]:
        """Up to ``limit`` durable events with ids > ``after``, in id order."""
        rows = await self._fetch(
            f"read the events of session {session!r}", _EVENTS, session, after, limit
        )
        return [
            ServiceEvent(id, kind, turn, json.loads(data), at) for id, kind, turn, data, at in rows
        ]

    async def sessions(
        self, *, prefix: str, after: str | None, limit: int, state: SessionState | None = None
    ) -> list[SessionSummary]:
        """Up to ``limit`` sessions whose id starts with ``prefix`` and sorts after ``after``.

        One statement: a range scan of the sessions' code-point index (schema step 3).
        """
        query, bounds = _listing(prefix, after, state)
        rows = await self._fetch(f"list the sessions under {prefix!r}", query, limit, *bounds)
        return [
            SessionSummary(
                session,
                "running" if running is not None else "queued" if queued else "idle",
                running,
                queued,
                at or 0.0,
            )
            for session, running, queued, at in rows
        ]

    # -- hints -----------------------------------------------------------------------------

    @asynccontextmanager
    async def hints(self) -> AsyncIterator[AsyncIterator[Hint]]:
        """Hints of work and stops from every replica, over one connection of the pool.

        The connection is the pool's for as long as the context lasts (``LISTEN`` needs one
        connection of its own), and goes back when it is left. A hint is sent when the
        write that causes it commits. If that connection is lost the iterator raises
        :class:`StoreUnavailable`: enter the context again (hints are never the source of
        truth; the poll finds what was missed meanwhile).
        """
        await self._check_once()
        acquire = getattr(self.pool, "acquire", None)
        if acquire is None:
            raise UsageError("hints need an asyncpg pool: LISTEN holds a connection of its own")
        listener = _Listener()
        async with AsyncExitStack() as stack:
            with translated("listen for hints"):
                connection = await stack.enter_async_context(acquire())
                await connection.add_listener(CHANNEL, listener.heard)
            connection.add_termination_listener(listener.lost)
            try:
                yield listener
            finally:
                listener.close()
                if not listener.lost_connection:  # a lost one has left the pool by itself
                    connection.remove_termination_listener(listener.lost)
                    with translated("stop listening for hints"):
                        await connection.remove_listener(CHANNEL, listener.heard)


class _Listener:
    """The hints heard on a connection, as an async iterator."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[Hint | None] = asyncio.Queue()
        self.lost_connection = False
        self._closed = False

    def heard(self, connection: Any, pid: int, channel: str, payload: str) -> None:
        """asyncpg's callback for a notification on the channel."""
        try:
            data = json.loads(payload)
            hint = Hint(data["kind"], data["session"])
        except (ValueError, TypeError, KeyError):
            return  # not one of ours: somebody else notifies on the channel
        if hint.kind in ("work", "stop") and isinstance(hint.session, str):
            self._queue.put_nowait(hint)

    def lost(self, connection: Any) -> None:
        """asyncpg's callback when the connection closes."""
        self.lost_connection = True
        self._queue.put_nowait(None)

    def close(self) -> None:
        """The context was left: the iterator ends."""
        self._closed = True
        self._queue.put_nowait(None)

    def __aiter__(self) -> _Listener:
        return self

    async def __anext__(self) -> Hint:
        if self._closed:
            raise StopAsyncIteration
        hint = await self._queue.get()
        if hint is not None:
            return hint
        if self.lost_connection and not self._closed:
            raise StoreUnavailable("the Postgres connection that listened for hints was lost")
        raise StopAsyncIteration


def _turn_view(row: Any) -> TurnView:
    return TurnView(
        row["turn_id"],
        row["turn_state"],
        holder=row["holder"],
        epoch=row["epoch"],
        lease_expires_at=row["expires"],
        steps=row["steps"],
        steers_taken=row["steers_taken"],
        stop_requested=row["stop_requested"],
        start=row["start_position"],
        end=row["end_position"],
        text=json.loads(row["answer"]),
        error=None if row["error"] is None else json.loads(row["error"]),
    )


def _input_view(session: str, row: Any) -> InputView:
    id: str = row["id"]
    text = codec.decode(id, row["body"], where=f"session {session!r}, input {id!r}").text
    return InputView(id, row["kind"], text, row["seq"], row["state"], row["turn"], row["step"])
