"""The Postgres store's ``cancel``: a waiting input taken back, in one locking statement.

Like every service write (see :mod:`._statements`), it locks the session's row first, so it
and a claim or a step that would take the input queue on one lock: exactly one of them wins,
and the other finds the input as the winner left it. An input that no longer waits (taken,
a prompt, cancelled already) is returned as it is, and nothing is written.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Final

from steerable.service_store import InputView
from steerable.stores.postgres._statements import FLAGS, LOCKED, Statements
from steerable.stores.postgres._views import INPUT_VIEW, input_view

__all__ = ["PostgresCancel"]

# $1 session, $2 id. Only the head of the queue (the first input waiting to be a turn, while
# no turn runs) has steers offered to it that wait: cancelled, it frees them, each then a
# turn of its own in its place. A steer offered to the running turn still counts against the
# turn's cap of offers (as in the memory reference: an offer once made stays counted). The
# final SELECT reads the input as the snapshot has it.
_CANCEL: Final = f"""
WITH {LOCKED}, gone AS (
    SELECT i.seq, i.id, i.turn, fresh.events, fresh.running
    FROM fresh JOIN steerable_inputs i ON i.session = fresh.session AND i.id = $2
    WHERE i.state = 'waiting'
), freed AS (
    SELECT i.seq, i.id FROM steerable_inputs i, gone
    WHERE gone.turn IS NULL AND gone.running IS NULL
        AND i.session = $1 AND i.state = 'waiting' AND i.turn = gone.id
), cancelled AS (
    UPDATE steerable_inputs i SET state = 'cancelled', turn = NULL
    FROM gone WHERE i.session = $1 AND i.seq = gone.seq
), unoffered AS (
    UPDATE steerable_inputs i SET turn = NULL
    WHERE i.session = $1 AND i.seq IN (SELECT seq FROM freed)
), logged AS (
    INSERT INTO steerable_events (session, id, kind, turn, data)
    SELECT $1, gone.events + 1, 'cancelled', gone.turn, json_build_object(
        'id', gone.id,
        'released', coalesce((SELECT json_agg(id ORDER BY seq) FROM freed), '[]'::json)
    )::text
    FROM gone
), counted AS (
    UPDATE steerable_sessions s SET version = s.version + 1, events = s.events + 1,
        queued = s.queued - (gone.turn IS NULL)::int + (SELECT count(*) FROM freed)
    FROM gone WHERE s.session = $1
)
SELECT {FLAGS}, EXISTS (SELECT FROM gone) AS cancelled, {INPUT_VIEW}
FROM (SELECT) AS one LEFT JOIN steerable_inputs i ON i.session = $1 AND i.id = $2
"""


class PostgresCancel(Statements):
    """The ``cancel`` verb of :class:`steerable.service_store.ServiceStore`."""

    __slots__ = ()

    async def cancel(self, session: str, id: str) -> InputView | None:
        """Take back the waiting input ``id`` (it becomes ``cancelled``); its view after.

        One statement (one round trip), run again only when it waited on the session's lock
        while another write committed. An input that was taken or became a prompt, or was
        cancelled before, is returned unchanged; None if the session never had it.
        """
        [row] = await self._write(f"cancel an input of session {session!r}", _CANCEL, session, id)
        if not row["known"] or row["id"] is None:
            return None
        view = input_view(session, row)
        if row["cancelled"]:
            return replace(view, state="cancelled", turn=None, step=None)
        return view
