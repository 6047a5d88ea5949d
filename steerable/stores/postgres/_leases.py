"""The Postgres store's renewal of many leases at once: one statement, one round trip.

The leases go in as three arrays (``unnest``); the statement locks the sessions' rows
``FOR UPDATE`` in the order of their ids, so two replicas renewing overlapping sets (one
of them holding stale leases) queue rather than deadlock, and every other write of those
sessions, which locks one row, queues behind it as it does behind a ``renew``. Each lease
is judged on the locked row as ``renew`` judges it (its epoch and holder, a running turn)
and extended to the server's ``now()`` plus the seconds; a stale lease is left as it is
and answered None. Like ``renew``, it leaves ``version`` alone: it changes only the expiry.

A turn's ``stop_requested`` is read from the statement's snapshot: a stop committed before
the renewal started is reported; one that commits while it waits for a lock is reported
by the next (or by the hint and the stop poll meanwhile).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg  # type: ignore[import-untyped]

from steerable.errors import StoreUnavailable
from steerable.service_store import Lease, Renewal
from steerable.stores.postgres._service import PostgresServiceTables
from steerable.stores.postgres._statements import RETRIES
from steerable.stores.postgres._translate import translated

# $1 sessions, $2 epochs, $3 holders (one per lease, in the caller's order), $4 seconds.
# A row per lease that was renewed: its place (n, from 1), the new expiry, the stop flag.
_RENEW_MANY = """
WITH want AS (
    SELECT w.session, w.epoch, w.holder, w.n
    FROM unnest($1::text[], $2::bigint[], $3::text[])
        WITH ORDINALITY AS w(session, epoch, holder, n)
), locked AS MATERIALIZED (
    SELECT s.session, s.epoch, s.holder, s.running FROM steerable_sessions s
    WHERE s.session = ANY($1::text[]) ORDER BY s.session FOR UPDATE
), held AS (
    SELECT l.session, l.running, w.n FROM locked l
    JOIN want w ON w.session = l.session AND w.epoch = l.epoch AND w.holder = l.holder
    WHERE l.running IS NOT NULL
), renewed AS (
    UPDATE steerable_sessions s SET expires = now() + make_interval(secs => $4)
    WHERE s.session IN (SELECT session FROM held)
    RETURNING s.session, extract(epoch FROM s.expires)::float8 AS expires
)
SELECT held.n, renewed.expires, coalesce(t.stop_requested, false) AS stop_requested
FROM held JOIN renewed USING (session)
    LEFT JOIN steerable_turns t ON t.session = held.session AND t.id = held.running
"""


class PostgresLeases(PostgresServiceTables):
    """:class:`PostgresServiceTables` with ``renew_many``."""

    __slots__ = ()

    async def renew_many(self, leases: Sequence[Lease], *, seconds: float) -> list[Renewal | None]:
        """Extend each of ``leases`` by ``seconds`` from now; None for each stale one."""
        if not leases:
            return []
        await self._check_once()
        args = (
            [lease.session for lease in leases],
            [lease.epoch for lease in leases],
            [lease.holder for lease in leases],
            seconds,
        )
        doing = f"renew {len(leases)} leases"
        for _ in range(RETRIES):
            with translated(doing):
                try:
                    rows: list[Any] = await self.pool.fetch(_RENEW_MANY, *args)
                except asyncpg.DeadlockDetectedError:  # rolled back whole: again, as it is
                    continue
            answers: list[Renewal | None] = [None] * len(leases)
            for row in rows:
                lease = leases[row["n"] - 1]
                new = Lease(lease.session, lease.holder, lease.epoch, row["expires"])
                answers[row["n"] - 1] = Renewal(new, row["stop_requested"])
            return answers
        raise StoreUnavailable(f"cannot {doing}: deadlocked on each of {RETRIES} attempts")
