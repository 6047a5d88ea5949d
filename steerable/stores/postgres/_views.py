"""The Postgres store's service views, each one statement that reads one snapshot.

``status``, ``input``, ``inputs``, ``turn``, ``turns``, ``transcript``, ``events``, ``sessions``
and ``stopping`` read what the locking writes recorded; none locks a row or waits for one.
Each is bounded by its ``limit`` in SQL, so a view of a long queue or history reads that many
rows' bodies (``status`` counts the rest on the index of waiting inputs).

The session's metadata is written here too, by ``set_metadata``: one upsert of the session's
row that no locking write reads (so it leaves the row's ``version`` alone), made for a
session that has none yet. Metadata, an input's included, is JSON text, NULL for ``{}``; so is
an input's trace context, in a column of its own.
"""

from __future__ import annotations

import json
from typing import Any, Final

import asyncpg  # type: ignore[import-untyped]

from steerable import codec
from steerable.errors import StoreUnavailable, UsageError
from steerable.service_store import (
    INPUT_STATES,
    Entry,
    InputState,
    InputView,
    ServiceEvent,
    SessionState,
    SessionSummary,
    Status,
    TurnView,
    listing,
)
from steerable.stores.postgres._statements import RETRIES, Statements
from steerable.stores.postgres._translate import translated

__all__ = [
    "INPUT_VIEW",
    "PostgresServiceViews",
    "input_view",
    "json_object",
    "object_text",
    "turn_view",
]

# A turn as TurnView has it: the lease's holder and expiry only while it runs.
_TURN_VIEW = """t.id AS turn_id, t.state AS turn_state,
    CASE WHEN t.id = s.running THEN s.holder END AS holder, t.epoch,
    CASE WHEN t.id = s.running AND s.holder IS NOT NULL
        THEN extract(epoch FROM s.expires)::float8 END AS expires,
    t.steps, t.steers_taken, t.stop_requested, t.start_position, t.end_position, t.answer,
    t.error, t.seq AS turn_seq, extract(epoch FROM t.started_at)::float8 AS started_at,
    extract(epoch FROM t.ended_at)::float8 AS ended_at, t.usage"""

INPUT_VIEW: Final = """i.id, i.kind, i.body, i.seq, i.state, i.turn, i.step, i.metadata,
    i.trace, extract(epoch FROM i.at)::float8 AS at"""
"""The columns of an input (alias ``i``) that :func:`input_view` reads."""

# One row per waiting input shown (at least one row): the first `limit` by seq, through the
# partial index of waiting inputs, which also counts them all.
_STATUS = f"""
SELECT {_TURN_VIEW}, coalesce(s.queued, 0) AS queued, s.metadata AS session_metadata,
    (SELECT count(*) FROM steerable_inputs w
        WHERE w.session = $1 AND w.state = 'waiting') AS waiting_total,
    i.*
FROM (SELECT) AS one
    LEFT JOIN steerable_sessions s ON s.session = $1
    LEFT JOIN steerable_turns t ON t.session = $1 AND t.id = s.running
    LEFT JOIN LATERAL (
        SELECT {INPUT_VIEW} FROM steerable_inputs i
        WHERE i.session = $1 AND i.state = 'waiting'
        ORDER BY i.seq LIMIT greatest($2::bigint, 0)
    ) AS i ON true
ORDER BY i.seq
"""

_INPUT = f"SELECT {INPUT_VIEW} FROM steerable_inputs i WHERE i.session = $1 AND i.id = $2"

# The state filter is a literal (one of four), so a filter on 'waiting' can use the partial
# index of waiting inputs.
_INPUTS = """
SELECT {columns} FROM steerable_inputs i WHERE i.session = $1 AND i.seq > $2{state}
ORDER BY i.seq LIMIT greatest($3::bigint, 0)
"""


_TURN = f"""
SELECT {_TURN_VIEW}, i.state AS input_state, i.turn AS input_turn, i.seq AS input_seq
FROM (SELECT) AS one
    LEFT JOIN steerable_sessions s ON s.session = $1
    LEFT JOIN steerable_turns t ON t.session = $1 AND t.id = $2
    LEFT JOIN steerable_inputs i ON i.session = $1 AND i.id = $2
"""

# The turns by their prompt's seq: a range of the index of step 4.
_TURNS = f"""
SELECT {_TURN_VIEW}
FROM steerable_turns t LEFT JOIN steerable_sessions s ON s.session = t.session
WHERE t.session = $1 AND t.seq > $2
ORDER BY t.seq LIMIT greatest($3::bigint, 0)
"""

# The turn of a message: the last claimed of the turns that started at or before it.
_TRANSCRIPT = """
SELECT m.position, m.id, m.body, (
    SELECT t.id FROM steerable_turns t WHERE t.session = $1 AND t.start_position <= m.position
    ORDER BY t.start_position DESC, t.began DESC LIMIT 1
) AS turn, extract(epoch FROM m.at)::float8 AS at
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
SELECT s.session, s.running, s.queued, extract(epoch FROM e.at)::float8 AS at, s.metadata
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

# The holder's sessions through the partial index of held sessions (step 4); a released
# lease has no holder.
_STOPPING = """
SELECT s.session FROM steerable_sessions s
    JOIN steerable_turns t ON t.session = s.session AND t.id = s.running
WHERE s.holder = $1 AND t.stop_requested
"""

_SET_METADATA = """
INSERT INTO steerable_sessions (session, metadata) VALUES ($1, $2)
ON CONFLICT (session) DO UPDATE SET metadata = excluded.metadata
"""


def _listing(prefix: str, after: str | None, state: SessionState | None) -> tuple[str, list[str]]:
    """The statement of a listing and its bounds (``$2``, ``$3``; ``$1`` is the limit)."""
    lower, included, upper = listing(prefix, after)
    bounds = f's.session COLLATE "C" {">=" if included else ">"} $2'
    if upper is not None:
        bounds += ' AND s.session COLLATE "C" < $3'
    args = [lower] if upper is None else [lower, upper]
    return _SESSIONS.format(bounds=bounds, state=_STATE_FILTER[state]), args


def object_text(value: dict[str, Any]) -> str | None:
    """A JSON object (metadata, usage) as the text a column keeps; None (NULL) for ``{}``."""
    return json.dumps(value) if value else None


def json_object(text: str | None) -> dict[str, Any]:
    """The JSON object a column keeps as text (:func:`object_text`); ``{}`` for NULL."""
    if text is None:
        return {}
    value: dict[str, Any] = json.loads(text)
    return value


def turn_view(row: Any) -> TurnView:
    """The :class:`TurnView` of a row with the columns of ``_TURN_VIEW``."""
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
        seq=row["turn_seq"] or 0,
        started_at=row["started_at"],
        ended_at=row["ended_at"],
        usage=json_object(row["usage"]),
    )


def input_view(session: str, row: Any) -> InputView:
    """The :class:`InputView` of a row with the columns of :data:`INPUT_VIEW`."""
    id: str = row["id"]
    text = codec.decode(id, row["body"], where=f"session {session!r}, input {id!r}").text
    return InputView(
        id,
        row["kind"],
        text,
        row["seq"],
        row["state"],
        row["turn"],
        row["step"],
        row["at"] or 0.0,
        json_object(row["metadata"]),
        json_object(row["trace"]),
    )


class PostgresServiceViews(Statements):
    """The reads of :class:`steerable.service_store.ServiceStore`, and ``set_metadata``."""

    __slots__ = ()

    async def status(self, session: str, *, limit: int = 100) -> Status:
        """The session's running turn, its first ``limit`` waiting inputs, and the counts."""
        rows = await self._fetch(f"read the status of session {session!r}", _STATUS, session, limit)
        head = rows[0]
        running = turn_view(head) if head["turn_id"] is not None else None
        waiting = [input_view(session, r) for r in rows if r["id"] is not None]
        return Status(
            session,
            running,
            waiting,
            head["queued"],
            head["waiting_total"],
            json_object(head["session_metadata"]),
        )

    async def input(self, session: str, id: str) -> InputView | None:
        """The input ``id`` and its fate, or None if the session never had it."""
        rows = await self._fetch(f"read an input of session {session!r}", _INPUT, session, id)
        return input_view(session, rows[0]) if rows else None

    async def inputs(
        self, session: str, *, after: int, limit: int, state: InputState | None = None
    ) -> list[InputView]:
        """Up to ``limit`` inputs with ``seq`` > ``after`` in order (only ``state``, if given)."""
        if state is not None and state not in INPUT_STATES:
            raise UsageError(f"an input's state is one of {INPUT_STATES}, not {state!r}")
        where = "" if state is None else f" AND i.state = '{state}'"
        query = _INPUTS.format(columns=INPUT_VIEW, state=where)
        rows = await self._fetch(
            f"read the inputs of session {session!r}", query, session, after, limit
        )
        return [input_view(session, r) for r in rows]

    async def turn(self, session: str, id: str) -> TurnView | None:
        """The turn ``id`` (``queued`` while its prompt waits), or None if there is none."""
        [row] = await self._fetch(f"read a turn of session {session!r}", _TURN, session, id)
        if row["turn_id"] is not None:
            return turn_view(row)
        if row["input_state"] == "waiting" and row["input_turn"] is None:
            return TurnView(id, "queued", seq=row["input_seq"])
        return None

    async def turns(self, session: str, *, after: int, limit: int) -> list[TurnView]:
        """Up to ``limit`` turns that started (running or ended), prompt ``seq`` > ``after``."""
        rows = await self._fetch(
            f"read the turns of session {session!r}", _TURNS, session, after, limit
        )
        return [turn_view(r) for r in rows]

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
                at,
            )
            for position, id, body, turn, at in rows
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
                json_object(metadata),
            )
            for session, running, queued, at, metadata in rows
        ]

    async def stopping(self, holder: str) -> list[str]:
        """The sessions ``holder`` holds whose running turn was asked to stop, sorted.

        One statement over the partial index of held sessions (schema step 4).
        """
        rows = await self._fetch(f"read the stops of holder {holder!r}", _STOPPING, holder)
        return sorted(session for (session,) in rows)

    async def set_metadata(self, session: str, metadata: dict[str, Any]) -> None:
        """Replace the session's metadata (the session need not have had an input)."""
        await self._check_once()
        doing = f"set the metadata of session {session!r}"
        text = object_text(metadata)
        for _ in range(RETRIES):
            with translated(doing):
                try:
                    await self.pool.execute(_SET_METADATA, session, text)
                except (asyncpg.DeadlockDetectedError, asyncpg.SerializationError):
                    continue  # (REPEATABLE READ: the row changed since the snapshot)
            return
        raise StoreUnavailable(f"cannot {doing}: the session changed under each of {RETRIES}")
