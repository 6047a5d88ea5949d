"""The MySQL store's service tables: inputs, turns, leases and events (schema step 2).

Every write is one transaction that first locks the session's ``steerable_service`` row
(``SELECT ... FOR UPDATE``): writers of one session queue there, fencing is checked under
that lock, and a refusal rolls back whole. The step is one CALL of the schema's
``steerable_step_v1``, which does the same server side; it also takes the core's lock, the
session's ``steerable_sessions`` row, so the service's saves and the core's never
interleave (always in that order: service row, then core row). Because the lock comes
before the transaction's first plain read, that read's snapshot (REPEATABLE READ) or
every read (READ COMMITTED) sees all that earlier writers of the session committed.

Times are the server's clock, read in the transaction (UTC seconds since the Unix epoch, as
exact decimals); a lease is live while its expiry is later than that clock. The views
read under a shared lock of the same row, so each answer is one consistent moment.

MySQL has no notifications: the store gives no hints, and the service polls.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, TypeVar

import aiomysql  # type: ignore[import-untyped]

from steerable import codec
from steerable.errors import Fenced, SteerableError, StoreUnavailable
from steerable.messages import Message
from steerable.service_store import (
    Accepted,
    Claim,
    Entry,
    EventKind,
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
    message_event,
)
from steerable.stores.mysql._driver import (
    ATTEMPTS,
    MAX_AT,
    RETRY,
    Connection,
    Cursor,
    Pool,
    Rows,
    broken,
    check_charset,
    check_id,
    code_of,
    error_of,
    rollback,
    text_of,
)
from steerable.stores.mysql._schema import NOW, STEP

__all__ = ["CORE_LOCK", "MySQLServiceTables", "Tx", "length_of", "locked"]

_T = TypeVar("_T")

_NOW = NOW
_MICRO = Decimal("0.000001")
_MAX_SECONDS = 10**9  # a lease longer than ~31 years is as good as forever (DECIMAL(20, 6))

_SERVICE = (
    "SELECT epoch, holder, running, queued, inputs, turns, events, expires, "
    + _NOW
    + " FROM steerable_service WHERE session = %s "
)
_TURN = (
    "SELECT id, start_position, cap, state, epoch, steps, steers_taken, offered,"
    " stop_requested, end_position, answer, error FROM steerable_turns"
)
_INPUT = "SELECT id, kind, text, seq, state, turn, step FROM steerable_inputs"
_LENGTH = "SELECT COALESCE(MAX(position) + 1, 0) FROM steerable_messages WHERE session = %s"
# the core's lock of a session (its steerable_sessions row), as steerable_save_v1 takes it
CORE_LOCK = (
    "INSERT INTO steerable_sessions (session) VALUES (%s) ON DUPLICATE KEY UPDATE session = session"
)

# A listing: a range scan of the session rows' primary key (VARBINARY ids compare by their
# UTF-8 bytes, which is code-point order), the state filter before the LIMIT, the last
# event's time by one lookup on the events' key. The bounds are filled in.
_SESSIONS = (
    "SELECT s.session, s.running, s.queued, e.at FROM steerable_service AS s"
    " LEFT JOIN steerable_events AS e ON e.session = s.session AND e.id = s.events"
    " WHERE {bounds} AND s.inputs > 0{state} ORDER BY s.session LIMIT %s"
)
_STATE_FILTER: dict[SessionState | None, str] = {
    None: "",
    "running": " AND s.running IS NOT NULL",
    "queued": " AND s.running IS NULL AND s.queued > 0",
    "idle": " AND s.running IS NULL AND s.queued = 0",
}


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


@dataclass(frozen=True, slots=True)
class _Service:
    """A session's ``steerable_service`` row, and the server's clock when it was read."""

    epoch: int
    holder: str | None
    running: str | None
    queued: int
    inputs: int
    turns: int
    events: int
    expires: Decimal | None
    now: Decimal

    @property
    def live(self) -> bool:
        return self.holder is not None and self.expires is not None and self.expires > self.now

    def until(self, seconds: float) -> Decimal:
        """The expiry of a lease of ``seconds`` from the clock of this read."""
        span = Decimal(repr(min(max(float(seconds), 0.0), _MAX_SECONDS)))
        return (self.now + span).quantize(_MICRO)


@dataclass(frozen=True, slots=True)
class _Turn:
    id: str
    start: int
    cap: int
    state: str
    epoch: int
    steps: int
    steers_taken: int
    offered: int
    stop_requested: bool
    end: int | None
    text: str
    error: str | None


class Tx:
    """The cursor of one transaction: statements and their rows."""

    def __init__(self, cursor: Cursor) -> None:
        self._cursor = cursor

    async def rows(self, sql: str, args: Sequence[object] = ()) -> Rows:
        await self._cursor.execute(sql, args)
        return await self._cursor.fetchall()

    async def run(self, sql: str, args: Sequence[object] = ()) -> int:
        return await self._cursor.execute(sql, args)

    async def restart(self) -> None:
        """End the transaction, which has only read so far, and begin a new one."""
        await self._cursor.execute("COMMIT")
        await self._cursor.execute("START TRANSACTION")

    async def emit(
        self, session: str, last: int, events: Sequence[tuple[EventKind, str | None, Any]]
    ) -> None:
        """Append ``events`` (kind, turn, data) with ids after ``last``, at the server's now."""
        if not events:
            return
        values = ", ".join([f"(%s, %s, %s, %s, %s, {_NOW})"] * len(events))
        args: list[object] = []
        for n, (kind, turn, data) in enumerate(events, start=last + 1):
            args += [session, n, kind, turn, json.dumps(data, separators=(",", ":"))]
        await self.run(
            f"INSERT INTO steerable_events (session, id, kind, turn, data, at) VALUES {values}",
            args,
        )


def _service(row: tuple[Any, ...]) -> _Service:
    epoch, holder, running, queued, inputs, turns, events, expires, now = row
    return _Service(
        int(epoch),
        None if holder is None else text_of(holder),
        None if running is None else text_of(running),
        int(queued),
        int(inputs),
        int(turns),
        int(events),
        expires,
        now,
    )


def _turn(row: tuple[Any, ...]) -> _Turn:
    id, start, cap, state, epoch, steps, taken, offered, stop, end, answer, error = row
    return _Turn(
        text_of(id),
        int(start),
        int(cap),
        text_of(state),
        int(epoch),
        int(steps),
        int(taken),
        int(offered),
        bool(stop),
        None if end is None else int(end),
        "" if answer is None else json.loads(answer),
        None if error is None else json.loads(error),
    )


def _turn_view(svc: _Service, turn: _Turn) -> TurnView:
    live = turn.id == svc.running
    expires = svc.expires if live and svc.holder is not None else None
    return TurnView(
        turn.id,
        turn.state,  # type: ignore[arg-type]  # written by this module: one of TurnState
        holder=svc.holder if live else None,
        epoch=turn.epoch,
        lease_expires_at=None if expires is None else float(expires),
        steps=turn.steps,
        steers_taken=turn.steers_taken,
        stop_requested=turn.stop_requested,
        start=turn.start,
        end=turn.end,
        text=turn.text,
        error=turn.error,
    )


def _input_view(row: tuple[Any, ...]) -> InputView:
    id, kind, text, seq, state, turn, step = row
    return InputView(
        text_of(id),
        text_of(kind),  # type: ignore[arg-type]  # written by this module: an InputKind
        json.loads(text),
        int(seq),
        text_of(state),  # type: ignore[arg-type]  # written by this module: an InputState
        None if turn is None else text_of(turn),
        None if step is None else int(step),
    )


async def locked(tx: Tx, session: str, *, share: bool = False) -> _Service | None:
    """The session's service row, locked for update (or shared); None when it has none."""
    lock = "LOCK IN SHARE MODE" if share else "FOR UPDATE"
    rows = await tx.rows(_SERVICE + lock, (session,))
    return _service(rows[0]) if rows else None


async def _turn_of(tx: Tx, session: str, id: str) -> _Turn | None:
    rows = await tx.rows(f"{_TURN} WHERE session = %s AND id = %s", (session, id))
    return _turn(rows[0]) if rows else None


async def _fenced(tx: Tx, lease: Lease) -> tuple[_Service, _Turn]:
    """The session's row and running turn, if ``lease`` still holds it; else :class:`Fenced`."""
    svc = await locked(tx, lease.session)
    if svc is None or svc.epoch != lease.epoch or svc.holder != lease.holder:
        raise Fenced(lease.session, lease.epoch, svc.epoch if svc else None)
    turn = None if svc.running is None else await _turn_of(tx, lease.session, svc.running)
    if turn is None:
        raise Fenced(lease.session, lease.epoch, svc.epoch)
    return svc, turn


async def length_of(tx: Tx, session: str) -> int:
    """How many messages the session's transcript holds, read in the transaction."""
    rows = await tx.rows(_LENGTH, (session,))
    return int(rows[0][0])


class MySQLServiceTables:
    """The :class:`steerable.service_store.ServiceStore` verbs of :class:`MySQLStore`."""

    _pool: Pool

    # provided by MySQLStore
    async def _check_once(self) -> None:
        raise NotImplementedError

    async def _run(
        self, sql: str, args: Sequence[object], *, session: str = "", at: int | None = None
    ) -> Rows:
        raise NotImplementedError

    async def _atomic(
        self, session: str, work: Callable[[Tx], Awaitable[_T]], *, at: int | None = None
    ) -> _T:
        """``work`` in one transaction, again after a deadlock (it was rolled back whole).

        Not again after a broken connection: the COMMIT may have been done.
        """
        await self._check_once()
        for attempt in range(ATTEMPTS):
            try:
                return await self._transaction(work)
            except aiomysql.MySQLError as exc:
                if code_of(exc) in RETRY and attempt < ATTEMPTS - 1:
                    continue
                raise error_of(exc, session, at) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def _transaction(self, work: Callable[[Tx], Awaitable[_T]]) -> _T:
        try:
            conn: Connection = await self._pool.acquire()
        except (aiomysql.MySQLError, OSError) as exc:
            raise error_of(exc, "", None) from exc
        try:
            check_charset(conn)
            cursor = await conn.cursor(aiomysql.Cursor)
            # ends whatever transaction the connection held (it could only have read)
            await cursor.execute("START TRANSACTION")
            result = await work(Tx(cursor))
            await cursor.execute("COMMIT")
            return result
        except aiomysql.MySQLError as exc:
            if broken(exc) or conn.closed:
                conn.close()
            else:
                await rollback(conn)
            raise
        except SteerableError:
            await rollback(conn)  # refused by the checks: nothing of it is kept
            raise
        except BaseException:
            conn.close()  # cancelled mid-answer: a state nobody knows, never back to the pool
            raise
        finally:
            await self._pool.release(conn)

    # -- writes ----------------------------------------------------------------------------

    async def enqueue(self, session: str, input: Input) -> Accepted:
        """Record ``input`` in the session's order of arrival; an id seen before is a no-op."""
        check_id(session, "session id")
        check_id(input.id, "input id")

        async def work(tx: Tx) -> Accepted:
            await tx.run(
                "INSERT INTO steerable_service (session) VALUES (%s)"
                " ON DUPLICATE KEY UPDATE session = session",
                (session,),
            )
            svc = await locked(tx, session)
            if svc is None:  # made just above, in this transaction
                raise StoreUnavailable(f"session {session!r}: its service row is missing")
            seen = await tx.rows(
                "SELECT kind, seq, offered, ahead FROM steerable_inputs"
                " WHERE session = %s AND id = %s",
                (session, input.id),
            )
            if seen:
                kind, seq, first, ahead = seen[0]
                turn = None if first is None else text_of(first)
                return Accepted(input.id, text_of(kind), int(seq), turn, int(ahead), True)  # type: ignore[arg-type]
            return await _enqueue(tx, session, svc, input)

        return await self._atomic(session, work)

    async def claim(
        self, holder: str, *, seconds: float, cap: int, session: str | None = None
    ) -> Claim | None:
        """Claim one session with work and no live lease (``session`` only, if given)."""
        check_id(holder, "holder id")
        if session is not None:
            check_id(session, "session id")

        async def work(tx: Tx) -> Claim | None:
            name = session
            if name is None:
                # a session being written to is skipped, not waited for: another claimer
                # has it, or the poll comes back to it
                scan = f"SELECT session FROM steerable_service WHERE claimable <= {_NOW}"
                rows = await tx.rows(scan + " ORDER BY claimable LIMIT 1 FOR UPDATE SKIP LOCKED")
                if not rows:
                    # SKIP LOCKED also skips a row that a view holds in share mode for a
                    # moment: a plain read finds it, and the lock below waits for the view
                    rows = await tx.rows(scan + " ORDER BY claimable LIMIT 1")
                    # that read took the snapshot (REPEATABLE READ) before the lock below:
                    # begin again, so the reads after it see what the lock's holder wrote
                    await tx.restart()
                if not rows:
                    return None
                name = text_of(rows[0][0])
            svc = await locked(tx, name)
            if svc is None or svc.live or (svc.running is None and svc.queued == 0):
                return None
            return await _claim(tx, name, svc, holder, seconds, cap)

        return await self._atomic(session or "", work)

    async def renew(self, lease: Lease, *, seconds: float) -> Renewal:
        """Extend ``lease`` by ``seconds`` from now; :class:`Fenced` if it is stale."""

        async def work(tx: Tx) -> Renewal:
            svc, turn = await _fenced(tx, lease)
            expires = svc.until(seconds)
            await tx.run(
                "UPDATE steerable_service SET expires = %s WHERE session = %s",
                (expires, lease.session),
            )
            new = Lease(lease.session, lease.holder, lease.epoch, float(expires))
            return Renewal(new, turn.stop_requested)

        return await self._atomic(lease.session, work)

    async def step(
        self, lease: Lease, messages: Sequence[Message], *, at: int, take: int
    ) -> list[Message]:
        """The turn's save-and-take, fenced by ``lease``; returns the steered messages taken.

        One CALL of the step procedure (see :mod:`._schema`), one round trip, steered or not.
        """
        check_id(lease.session, "session id")
        for message in messages:
            check_id(message.id, "message id")
        batch = [
            [m.id, codec.encode(m), json.dumps(message_event(m, at + n), separators=(",", ":"))]
            for n, m in enumerate(messages)
        ]
        await self._check_once()
        args = (
            lease.session,
            lease.holder,
            lease.epoch,
            min(at, MAX_AT),
            min(max(take, 0), MAX_AT),
            counts_as_step(messages, take),
            json.dumps(batch, ensure_ascii=False, separators=(",", ":")),
        )
        call = f"CALL {STEP}(%s, %s, %s, %s, %s, %s, %s)"
        rows = await self._run(call, args, session=lease.session, at=at)
        where = f"a steer taken in session {lease.session!r}"
        return [codec.decode(text_of(id), body, where=where) for id, body in rows]

    async def end_turn(self, lease: Lease, outcome: Outcome) -> str | None:
        """Record the turn's end and release the lease; the next turn's prompt id, if any."""

        async def work(tx: Tx) -> str | None:
            svc, turn = await _fenced(tx, lease)
            session = lease.session
            end = await length_of(tx, session)
            error = None if outcome.error is None else json.dumps(outcome.error)
            await tx.run(
                "UPDATE steerable_turns SET state = %s, answer = %s, error = %s,"
                " end_position = %s WHERE session = %s AND id = %s",
                (outcome.state, json.dumps(outcome.text), error, end, session, turn.id),
            )
            # the steers offered and never taken: each a turn of its own, in its place
            freed = await tx.run(
                "UPDATE steerable_inputs SET turn = NULL"
                " WHERE session = %s AND state = 'waiting' AND turn = %s",
                (session, turn.id),
            )
            await tx.emit(session, svc.events, [("turn_ended", turn.id, {"state": outcome.state})])
            await tx.run(
                "UPDATE steerable_service SET running = NULL, holder = NULL, expires = NULL,"
                " queued = queued + %s, events = events + 1 WHERE session = %s",
                (freed, session),
            )
            following = await tx.rows(
                "SELECT id FROM steerable_inputs WHERE session = %s AND state = 'waiting'"
                " AND turn IS NULL ORDER BY seq LIMIT 1",
                (session,),
            )
            return text_of(following[0][0]) if following else None

        return await self._atomic(lease.session, work)

    async def stop(self, session: str) -> str | None:
        """Ask the running turn to stop; its id, or None when no turn runs."""
        check_id(session, "session id")

        async def work(tx: Tx) -> str | None:
            svc = await locked(tx, session)
            turn = None if svc is None or svc.running is None else svc.running
            if svc is None or turn is None:
                return None
            changed = await tx.run(
                "UPDATE steerable_turns SET stop_requested = TRUE"
                " WHERE session = %s AND id = %s AND NOT stop_requested",
                (session, turn),
            )
            if changed:
                await tx.emit(session, svc.events, [("stop", turn, {})])
                await tx.run(
                    "UPDATE steerable_service SET events = events + 1 WHERE session = %s",
                    (session,),
                )
            return turn

        return await self._atomic(session, work)

    # -- views -----------------------------------------------------------------------------

    async def status(self, session: str) -> Status:
        """The session's running turn, waiting inputs and queue length."""
        check_id(session, "session id")

        async def work(tx: Tx) -> Status:
            svc = await locked(tx, session, share=True)
            if svc is None:
                return Status(session, None, [], 0)
            turn = None if svc.running is None else await _turn_of(tx, session, svc.running)
            rows = await tx.rows(
                f"{_INPUT} WHERE session = %s AND state = 'waiting' ORDER BY seq", (session,)
            )
            running = None if turn is None else _turn_view(svc, turn)
            return Status(session, running, [_input_view(r) for r in rows], svc.queued)

        return await self._atomic(session, work)

    async def input(self, session: str, id: str) -> InputView | None:
        """The input ``id`` and its fate, or None if the session never had it."""
        check_id(session, "session id")
        if len(id) > 255:
            return None  # no stored id is that long
        await self._check_once()
        rows = await self._run(f"{_INPUT} WHERE session = %s AND id = %s", (session, id))
        return _input_view(rows[0]) if rows else None

    async def turn(self, session: str, id: str) -> TurnView | None:
        """The turn ``id`` (``queued`` while its prompt waits), or None if there is none."""
        check_id(session, "session id")
        if len(id) > 255:
            return None

        async def work(tx: Tx) -> TurnView | None:
            svc = await locked(tx, session, share=True)
            if svc is None:
                return None
            turn = await _turn_of(tx, session, id)
            if turn is not None:
                return _turn_view(svc, turn)
            rows = await tx.rows(
                "SELECT 1 FROM steerable_inputs WHERE session = %s AND id = %s"
                " AND state = 'waiting' AND turn IS NULL",
                (session, id),
            )
            return TurnView(id, "queued") if rows else None

        return await self._atomic(session, work)

    async def transcript(self, session: str, *, after: int, limit: int) -> list[Entry]:
        """Up to ``limit`` messages at positions > ``after`` (-1: from the start), with turns."""
        check_id(session, "session id")
        await self._check_once()
        # a message's turn is the last claimed whose start is at or before it
        rows = await self._run(
            "SELECT m.position, m.id, m.body, (SELECT t.id FROM steerable_turns AS t"
            " WHERE t.session = m.session AND t.start_position <= m.position"
            " ORDER BY t.ord DESC LIMIT 1)"
            " FROM steerable_messages AS m WHERE m.session = %s AND m.position > %s"
            " ORDER BY m.position LIMIT %s",
            (session, min(max(after, -1), MAX_AT), min(max(limit, 0), MAX_AT)),
        )
        return [
            Entry(
                int(position),
                codec.decode(text_of(id), body, where=f"session {session!r}, position {position}"),
                None if turn is None else text_of(turn),
            )
            for position, id, body, turn in rows
        ]

    async def events(self, session: str, *, after: int, limit: int) -> list[ServiceEvent]:
        """Up to ``limit`` durable events with ids > ``after``, in id order."""
        check_id(session, "session id")
        await self._check_once()
        rows = await self._run(
            "SELECT id, kind, turn, data, at FROM steerable_events"
            " WHERE session = %s AND id > %s ORDER BY id LIMIT %s",
            (session, min(max(after, 0), MAX_AT), min(max(limit, 0), MAX_AT)),
        )
        return [
            ServiceEvent(
                int(id),
                text_of(kind),  # type: ignore[arg-type]  # written by this module
                None if turn is None else text_of(turn),
                json.loads(data),
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
        rows = await self._run(sql, (*bounds, min(max(limit, 0), MAX_AT)))
        return [
            SessionSummary(
                text_of(session),
                "running" if running is not None else "queued" if queued else "idle",
                None if running is None else text_of(running),
                int(queued),
                0.0 if at is None else float(at),
            )
            for session, running, queued, at in rows
        ]


# -- the writes' work, inside their transaction ----------------------------------------------


async def _enqueue(tx: Tx, session: str, svc: _Service, input: Input) -> Accepted:
    running = None if svc.running is None else await _turn_of(tx, session, svc.running)
    offered: str | None = None
    if (
        input.kind == "steer"
        and running is not None
        and not running.stop_requested
        and running.offered < running.cap
    ):
        offered = running.id
        await tx.run(
            "UPDATE steerable_turns SET offered = offered + 1 WHERE session = %s AND id = %s",
            (session, offered),
        )
    ahead = 0 if offered else (running is not None) + svc.queued
    # a steer's message, ready for the step procedure to copy when it takes it
    body = codec.encode(input.message(steered=True)) if input.kind == "steer" else None
    seq = svc.inputs + 1
    await tx.run(
        "INSERT INTO steerable_inputs"
        " (session, seq, id, kind, text, body, offered, ahead, state, turn)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, 'waiting', %s)",
        (session, seq, input.id, input.kind, json.dumps(input.text), body, offered, ahead, offered),
    )
    data = {"id": input.id, "kind": input.kind, "turn": offered}
    await tx.emit(session, svc.events, [("input", offered, data)])
    await tx.run(
        "UPDATE steerable_service SET inputs = inputs + 1, events = events + 1,"
        " queued = queued + %s WHERE session = %s",
        (0 if offered else 1, session),
    )
    return Accepted(input.id, input.kind, seq, offered, ahead)


async def _start(tx: Tx, session: str, ord: int, start: int, cap: int, epoch: int) -> str:
    """Make the first queued input the prompt of a new running turn; the turn's id."""
    first = await tx.rows(
        "SELECT seq, id FROM steerable_inputs WHERE session = %s AND state = 'waiting'"
        " AND turn IS NULL ORDER BY seq LIMIT 1",
        (session,),
    )
    seq, raw = first[0]  # the session's queued count says there is one
    id = text_of(raw)  # a str: aiomysql cannot send back the bytes it read
    await tx.run(
        "UPDATE steerable_inputs SET state = 'prompt', turn = id WHERE session = %s AND seq = %s",
        (session, seq),
    )
    await tx.run(
        "INSERT INTO steerable_turns (session, id, ord, start_position, cap, state, epoch)"
        " VALUES (%s, %s, %s, %s, %s, 'running', %s)",
        (session, id, ord, start, cap, epoch),
    )
    return id


async def _claim(
    tx: Tx, session: str, svc: _Service, holder: str, seconds: float, cap: int
) -> Claim:
    epoch = svc.epoch + 1
    expires = svc.until(seconds)
    rows = await tx.rows(
        "SELECT position, id, body FROM steerable_messages WHERE session = %s ORDER BY position",
        (session,),
    )
    messages = [
        codec.decode(text_of(id), body, where=f"session {session!r}, position {position}")
        for position, id, body in rows
    ]
    events: list[tuple[EventKind, str | None, Any]] = []
    resumed = svc.running is not None
    if svc.running is None:
        name = await _start(tx, session, svc.turns + 1, len(messages), cap, epoch)
    else:
        name = svc.running
        events.append(("holder", name, {"holder": holder, "epoch": epoch}))
        await tx.run(
            "UPDATE steerable_turns SET epoch = %s WHERE session = %s AND id = %s",
            (epoch, session, name),
        )
    turn = await _turn_of(tx, session, name)
    if turn is None:  # made or found just above, in this transaction
        raise StoreUnavailable(f"session {session!r}: the turn {name!r} is missing")
    prompts = await tx.rows(f"{_INPUT} WHERE session = %s AND id = %s", (session, name))
    prompt = _input_view(prompts[0])
    events.append(("turn_started", name, {"epoch": epoch, "holder": holder, "resumed": resumed}))
    await tx.emit(session, svc.events, events)
    await tx.run(
        "UPDATE steerable_service SET epoch = %s, holder = %s, expires = %s, running = %s,"
        " queued = queued - %s, turns = turns + %s, events = events + %s WHERE session = %s",
        (epoch, holder, expires, name, int(not resumed), int(not resumed), len(events), session),
    )
    return Claim(
        Lease(session, holder, epoch, float(expires)),
        name,
        Input(prompt.kind, prompt.text, prompt.id),
        turn.start,
        messages,
        resumed,
        turn.steps,
        turn.steers_taken,
        turn.cap,
        turn.stop_requested,
    )
