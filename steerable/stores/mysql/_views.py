"""The MySQL store's service reads: status, inputs, turns, transcript, events, listings, stops.

Every read is bounded by its ``limit`` and reads no more rows than it returns (texts
included): each pages a key in its order (the inputs' (session, state, seq) and (session,
seq), the turns' (session, seq), the messages' and events' primary keys). A read that
joins the session's row with other rows is one statement (one snapshot) or runs under a
shared lock of that row (``status``, ``turn``), so each answer is one consistent moment.
``stopping`` is the stop poll of a replica: one statement over the service rows' holder key
and the running turns' primary key, reading only the holder's own sessions.
"""

from __future__ import annotations

from steerable import codec
from steerable.service_store import (
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
from steerable.stores.mysql._driver import MAX_AT, check_id, text_of
from steerable.stores.mysql._rows import (
    BY_STATE,
    INPUT,
    TURN_COLUMNS,
    input_view,
    json_object,
    turn_row,
    turn_view,
)
from steerable.stores.mysql._transaction import Transactions, Tx, locked, turn_of, waiting_of

__all__ = ["STOPPING", "TURNS", "WAITING", "MySQLServiceViews", "listing_query"]

# A listing: a range scan of the session rows' primary key (VARBINARY ids compare by their
# UTF-8 bytes, which is code-point order), the state filter before the LIMIT, the last
# event's time by one lookup on the events' key. The bounds are filled in.
_SESSIONS = (
    "SELECT s.session, s.running, s.queued, e.at, s.metadata FROM steerable_service AS s"
    " LEFT JOIN steerable_events AS e ON e.session = s.session AND e.id = s.events"
    " WHERE {bounds} AND s.inputs > 0{state} ORDER BY s.session LIMIT %s"
)
_STATE_FILTER: dict[SessionState | None, str] = {
    None: "",
    "running": " AND s.running IS NOT NULL",
    "queued": " AND s.running IS NULL AND s.queued > 0",
    "idle": " AND s.running IS NULL AND s.queued = 0",
}

TURNS = (
    f"SELECT {', '.join(f't.{c}' for c in TURN_COLUMNS)}, s.running, s.holder, s.expires"
    " FROM steerable_turns AS t FORCE INDEX (steerable_turns_seq)"
    " JOIN steerable_service AS s ON s.session = t.session"
    " WHERE t.session = %s AND t.seq > %s ORDER BY t.seq LIMIT %s"
)
"""A page of turns by the (session, seq) key, each with its session's lease columns."""

STOPPING = (
    "SELECT s.session FROM steerable_service AS s FORCE INDEX (steerable_service_holder)"
    " JOIN steerable_turns AS t ON t.session = s.session AND t.id = s.running"
    " WHERE s.holder = %s AND t.stop_requested ORDER BY s.session"
)
"""The stop poll: a ref of the holder key, in session order, and the running turn's row."""

WAITING = f"{INPUT}{BY_STATE} WHERE session = %s AND state = 'waiting' ORDER BY seq LIMIT %s"
"""The first waiting inputs of a status, by the (session, state, seq) key: no more read."""


def _bound(value: int) -> int:
    """A limit or a position as the BIGINT columns take it."""
    return min(max(value, 0), MAX_AT)


def listing_query(
    prefix: str, after: str | None, state: SessionState | None
) -> tuple[str, list[str]]:
    """The SELECT of a listing (its LIMIT the last parameter, left out) and its bounds.

    A bound compared with a VARBINARY id is compared as its UTF-8 bytes (a binary string
    wins the comparison's type), so the primary key bounds the scan.
    """
    lower, included, upper = listing(prefix, after)
    bounds = f"s.session {'>=' if included else '>'} %s"
    args = [lower]
    if upper is not None:
        bounds += " AND s.session < %s"
        args.append(upper)
    return _SESSIONS.format(bounds=bounds, state=_STATE_FILTER[state]), args


class MySQLServiceViews(Transactions):
    """The :class:`steerable.service_store.ServiceStore` reads of :class:`MySQLStore`."""

    async def status(self, session: str, *, limit: int = 100) -> Status:
        """The session's running turn, its first ``limit`` waiting inputs, and the counts."""
        check_id(session, "session id")
        first = _bound(limit)

        async def work(tx: Tx) -> Status:
            svc = await locked(tx, session, share=True)
            if svc is None:
                return Status(session, None, [], 0, 0)
            turn = None if svc.running is None else await turn_of(tx, session, svc.running)
            rows = await tx.rows(WAITING, (session, first))
            # fewer than asked: that is all of them, and no count is needed
            total = len(rows) if len(rows) < first else await waiting_of(tx, session)
            running = None
            if turn is not None:
                running = turn_view(
                    turn, running=svc.running, holder=svc.holder, expires=svc.expires
                )
            waiting = [input_view(r) for r in rows]
            return Status(session, running, waiting, svc.queued, total, svc.metadata)

        return await self._atomic(session, work)

    async def inputs(
        self, session: str, *, after: int, limit: int, state: InputState | None = None
    ) -> list[InputView]:
        """Up to ``limit`` inputs with ``seq`` > ``after`` in order (only ``state``, if given)."""
        check_id(session, "session id")
        await self._check_once()
        sql, args = f"{INPUT} WHERE session = %s AND seq > %s", [session, _bound(after)]
        if state is not None:
            sql = f"{INPUT}{BY_STATE} WHERE session = %s AND state = %s AND seq > %s"
            args.insert(1, state)
        rows = await self._run(f"{sql} ORDER BY seq LIMIT %s", (*args, _bound(limit)))
        return [input_view(r) for r in rows]

    async def turns(self, session: str, *, after: int, limit: int) -> list[TurnView]:
        """Up to ``limit`` turns that started (running or ended), prompt ``seq`` > ``after``.

        One statement: the turns' (session, seq) key, joined with the session's row for
        the running turn's lease.
        """
        check_id(session, "session id")
        await self._check_once()
        rows = await self._run(TURNS, (session, _bound(after), _bound(limit)), session=session)
        width = len(TURN_COLUMNS)
        views = []
        for row in rows:
            running, holder, expires = row[width:]
            views.append(
                turn_view(
                    turn_row(row),
                    running=None if running is None else text_of(running),
                    holder=None if holder is None else text_of(holder),
                    expires=expires,
                )
            )
        return views

    async def stopping(self, holder: str) -> list[str]:
        """The sessions ``holder`` holds whose running turn was asked to stop, in order.

        One statement (:data:`STOPPING`), the poll of a replica on a store without
        notifications: it reads the holder's own sessions only.
        """
        check_id(holder, "holder id")
        await self._check_once()
        rows = await self._run(STOPPING, (holder,))
        return [text_of(session) for (session,) in rows]

    async def input(self, session: str, id: str) -> InputView | None:
        """The input ``id`` and its fate, or None if the session never had it."""
        check_id(session, "session id")
        if len(id) > 255:
            return None  # no stored id is that long
        await self._check_once()
        rows = await self._run(f"{INPUT} WHERE session = %s AND id = %s", (session, id))
        return input_view(rows[0]) if rows else None

    async def turn(self, session: str, id: str) -> TurnView | None:
        """The turn ``id`` (``queued`` while its prompt waits), or None if there is none."""
        check_id(session, "session id")
        if len(id) > 255:
            return None

        async def work(tx: Tx) -> TurnView | None:
            svc = await locked(tx, session, share=True)
            if svc is None:
                return None
            turn = await turn_of(tx, session, id)
            if turn is not None:
                return turn_view(turn, running=svc.running, holder=svc.holder, expires=svc.expires)
            rows = await tx.rows(
                "SELECT seq FROM steerable_inputs WHERE session = %s AND id = %s"
                " AND state = 'waiting' AND turn IS NULL",
                (session, id),
            )
            return TurnView(id, "queued", seq=int(rows[0][0])) if rows else None

        return await self._atomic(session, work)

    async def transcript(self, session: str, *, after: int, limit: int) -> list[Entry]:
        """Up to ``limit`` messages at positions > ``after`` (-1: from the start), with turns."""
        check_id(session, "session id")
        await self._check_once()
        # a message's turn is the last claimed whose start is at or before it
        rows = await self._run(
            "SELECT m.position, m.id, m.body, (SELECT t.id FROM steerable_turns AS t"
            " WHERE t.session = m.session AND t.start_position <= m.position"
            " ORDER BY t.ord DESC LIMIT 1), m.at"
            " FROM steerable_messages AS m WHERE m.session = %s AND m.position > %s"
            " ORDER BY m.position LIMIT %s",
            (session, min(max(after, -1), MAX_AT), _bound(limit)),
        )
        return [
            Entry(
                int(position),
                codec.decode(text_of(id), body, where=f"session {session!r}, position {position}"),
                None if turn is None else text_of(turn),
                None if at is None else float(at),  # stored before schema 3: not recorded
            )
            for position, id, body, turn, at in rows
        ]

    async def events(self, session: str, *, after: int, limit: int) -> list[ServiceEvent]:
        """Up to ``limit`` durable events with ids > ``after``, in id order."""
        check_id(session, "session id")
        await self._check_once()
        rows = await self._run(
            "SELECT id, kind, turn, data, at FROM steerable_events"
            " WHERE session = %s AND id > %s ORDER BY id LIMIT %s",
            (session, _bound(after), _bound(limit)),
        )
        return [
            ServiceEvent(
                int(id),
                text_of(kind),  # type: ignore[arg-type]  # written by this store
                None if turn is None else text_of(turn),
                json_object(data),
                float(at),
            )
            for id, kind, turn, data, at in rows
        ]

    async def sessions(
        self, *, prefix: str, after: str | None, limit: int, state: SessionState | None = None
    ) -> list[SessionSummary]:
        """Up to ``limit`` sessions whose id starts with ``prefix`` and sorts after ``after``.

        One statement: a range scan of the session rows' primary key.
        """
        await self._check_once()
        sql, bounds = listing_query(prefix, after, state)
        rows = await self._run(sql, (*bounds, _bound(limit)))
        return [
            SessionSummary(
                text_of(session),
                "running" if running is not None else "queued" if queued else "idle",
                None if running is None else text_of(running),
                int(queued),
                0.0 if at is None else float(at),
                json_object(metadata),
            )
            for session, running, queued, at, metadata in rows
        ]
