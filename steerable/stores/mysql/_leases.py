"""The MySQL store's renewal of many leases at once: one transaction for them all.

Three statements in one transaction of :mod:`._transaction`: the sessions' service rows
locked ``FOR UPDATE`` in the order of their ids (so two replicas renewing overlapping sets
queue rather than deadlock, and a deadlock the server reports anyway runs the transaction
again), the running turns' stop flags read after the locks (so they see every stop
committed before), and one ``UPDATE`` of the expiries of the leases that hold. Each lease
is judged as ``renew`` judges it (its epoch and holder, a running turn), on the server's
clock read with the locks; a stale one is left as it is and answered None.
"""

from __future__ import annotations

from collections.abc import Sequence

from steerable.service_store import Lease, Renewal
from steerable.stores.mysql._driver import text_of
from steerable.stores.mysql._rows import SERVICE, ServiceRow, service_row
from steerable.stores.mysql._service import MySQLServiceTables
from steerable.stores.mysql._transaction import Tx

_COLUMNS = SERVICE.split(" FROM steerable_service ")[0]
"""``SELECT`` and the columns :func:`service_row` reads, then the session's id is added."""


async def _renew_many(tx: Tx, leases: Sequence[Lease], seconds: float) -> list[Renewal | None]:
    sessions = sorted({lease.session for lease in leases})
    marks = ", ".join(["%s"] * len(sessions))
    rows = await tx.rows(
        f"{_COLUMNS}, session FROM steerable_service WHERE session IN ({marks})"
        " ORDER BY session FOR UPDATE",
        sessions,
    )
    found: dict[str, ServiceRow] = {text_of(row[-1]): service_row(row[:-1]) for row in rows}
    running = sorted(
        (session, svc.running) for session, svc in found.items() if svc.running is not None
    )
    stops: dict[str, bool] = {}
    if running:
        pairs = ", ".join(["(%s, %s)"] * len(running))
        flat = [value for pair in running for value in pair]
        for session, stop in await tx.rows(
            f"SELECT session, stop_requested FROM steerable_turns WHERE (session, id) IN ({pairs})",
            flat,
        ):
            stops[text_of(session)] = bool(stop)
    if not found:
        return [None] * len(leases)
    # the statement's clock (UTC_TIMESTAMP is the statement's start, the same on every row)
    until = next(iter(found.values())).until(seconds)
    answers: list[Renewal | None] = []
    renewed: set[str] = set()
    for lease in leases:
        svc = found.get(lease.session)
        # stale: another epoch or holder, or no running turn (it ended), as renew finds it
        if (
            svc is None
            or (svc.epoch, svc.holder) != (lease.epoch, lease.holder)
            or lease.session not in stops
        ):
            answers.append(None)
        else:
            new = Lease(lease.session, lease.holder, lease.epoch, float(until))
            answers.append(Renewal(new, stops[lease.session]))
            renewed.add(lease.session)
    if renewed:
        marks = ", ".join(["%s"] * len(renewed))
        await tx.run(
            f"UPDATE steerable_service SET expires = %s WHERE session IN ({marks})",
            [until, *sorted(renewed)],
        )
    return answers


class MySQLLeases(MySQLServiceTables):
    """:class:`MySQLServiceTables` with ``renew_many``."""

    async def renew_many(self, leases: Sequence[Lease], *, seconds: float) -> list[Renewal | None]:
        """Extend each of ``leases`` by ``seconds`` from now; None for each stale one."""
        if not leases:
            return []

        async def work(tx: Tx) -> list[Renewal | None]:
            return await _renew_many(tx, leases, seconds)

        return await self._atomic("", work)
