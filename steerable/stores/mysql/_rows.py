"""The MySQL store's service rows as read, and the views built from them.

Each ``SELECT`` list here and the function that decodes its row are kept side by side, so
a column added to one is added to the other. Ids and states are VARBINARY/ASCII columns
(bytes or str, by the pool's ``use_unicode``); texts, answers, errors, usage, metadata and
an input's trace context are JSON text; times are exact decimals of seconds since the Unix epoch.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from steerable.service_store import InputView, TurnView
from steerable.stores.mysql._driver import text_of
from steerable.stores.mysql._schema import NOW

__all__ = [
    "BY_STATE",
    "INPUT",
    "SERVICE",
    "TURN",
    "TURN_COLUMNS",
    "ServiceRow",
    "TurnRow",
    "input_view",
    "json_object",
    "object_text",
    "service_row",
    "turn_row",
    "turn_view",
]

_MICRO = Decimal("0.000001")
_MAX_SECONDS = 10**9  # a lease longer than ~31 years is as good as forever (DECIMAL(20, 6))

SERVICE = (
    "SELECT epoch, holder, running, queued, inputs, turns, events, expires, metadata, mark, "
    + NOW
    + " FROM steerable_service WHERE session = %s "
)
"""A session's service row and the server's clock; the lock clause is appended."""

TURN_COLUMNS = (
    *("id", "start_position", "cap", "state", "epoch", "steps", "steers_taken", "offered"),
    *("stop_requested", "end_position", "answer", "error", "seq", "started_at", "ended_at"),
    "token_usage",
)
"""The columns of a turn's row, as :func:`turn_row` reads them."""

TURN = f"SELECT {', '.join(TURN_COLUMNS)} FROM steerable_turns"
"""A turn's row; the WHERE clause is appended."""

INPUT = "SELECT id, kind, text, seq, state, turn, step, at, metadata, trace FROM steerable_inputs"
"""An input's row, as :func:`input_view` reads it; the WHERE clause is appended."""

BY_STATE = " FORCE INDEX (steerable_inputs_state)"
"""Appended to :data:`INPUT` for the inputs of one state in their order: the optimizer
would take the primary key for the ORDER BY on a small table, and read every row of the
session (texts and all) to find a few waiting ones."""


def object_text(value: dict[str, Any]) -> str | None:
    """A JSON object as stored: its JSON text, or NULL for an empty one."""
    return json.dumps(value, separators=(",", ":")) if value else None


def json_object(text: str | bytes | None) -> dict[str, Any]:
    """A stored JSON object (metadata, usage) back; ``{}`` for NULL."""
    if text is None:
        return {}
    value: dict[str, Any] = json.loads(text)
    return value


def _time(value: Decimal | None) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True, slots=True)
class ServiceRow:
    """A session's ``steerable_service`` row, and the server's clock when it was read."""

    epoch: int
    holder: str | None
    running: str | None
    queued: int
    inputs: int
    turns: int
    events: int
    expires: Decimal | None
    metadata: dict[str, Any]
    mark: str
    """The transcript's mark ("" for a row that has none: no claimer holds that)."""
    now: Decimal

    @property
    def live(self) -> bool:
        return self.holder is not None and self.expires is not None and self.expires > self.now

    def until(self, seconds: float) -> Decimal:
        """The expiry of a lease of ``seconds`` from the clock of this read."""
        span = Decimal(repr(min(max(float(seconds), 0.0), _MAX_SECONDS)))
        return (self.now + span).quantize(_MICRO)


def service_row(row: tuple[Any, ...]) -> ServiceRow:
    """A row of :data:`SERVICE`."""
    epoch, holder, running, queued, inputs, turns, events, expires, metadata, mark, now = row
    return ServiceRow(
        int(epoch),
        None if holder is None else text_of(holder),
        None if running is None else text_of(running),
        int(queued),
        int(inputs),
        int(turns),
        int(events),
        expires,
        json_object(metadata),
        "" if mark is None else text_of(mark),
        now,
    )


@dataclass(frozen=True, slots=True)
class TurnRow:
    """A ``steerable_turns`` row."""

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
    seq: int
    started_at: Decimal | None
    ended_at: Decimal | None
    usage: dict[str, int]


def turn_row(row: Sequence[Any]) -> TurnRow:
    """A row of :data:`TURN` (its first 16 columns)."""
    id, start, cap, state, epoch, steps, taken, offered, stop, end, answer, error = row[:12]
    seq, started_at, ended_at, usage = row[12:16]
    return TurnRow(
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
        int(seq),
        started_at,
        ended_at,
        json_object(usage),
    )


def turn_view(
    turn: TurnRow, *, running: str | None, holder: str | None, expires: Decimal | None
) -> TurnView:
    """The view of ``turn``; the lease's fields only if it is the session's ``running`` one."""
    live = turn.id == running
    return TurnView(
        turn.id,
        turn.state,  # type: ignore[arg-type]  # written by this store: one of TurnState
        holder=holder if live else None,
        epoch=turn.epoch,
        lease_expires_at=_time(expires) if live and holder is not None else None,
        steps=turn.steps,
        steers_taken=turn.steers_taken,
        stop_requested=turn.stop_requested,
        start=turn.start,
        end=turn.end,
        text=turn.text,
        error=turn.error,
        seq=turn.seq,
        started_at=_time(turn.started_at),
        ended_at=_time(turn.ended_at),
        usage=turn.usage,
    )


def input_view(row: tuple[Any, ...]) -> InputView:
    """A row of :data:`INPUT`; an input of before schema 3 arrived at 0.0 (not recorded)."""
    id, kind, text, seq, state, turn, step, at, metadata, trace = row
    return InputView(
        text_of(id),
        text_of(kind),  # type: ignore[arg-type]  # written by this store: an InputKind
        json.loads(text),
        int(seq),
        text_of(state),  # type: ignore[arg-type]  # written by this store: an InputState
        None if turn is None else text_of(turn),
        None if step is None else int(step),
        0.0 if at is None else float(at),
        json_object(metadata),
        json_object(trace),
    )
