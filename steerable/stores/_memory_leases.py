"""The memory store's renewal of many leases at once: one pass under the store's lock.

The reference for the other backends' ``renew_many``: each lease is judged as ``renew``
judges it, in the order given, and a stale one is None in its place.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from steerable.errors import Fenced
from steerable.service_store import Lease, Renewal
from steerable.stores._memory_service import MemoryServiceTables


class MemoryLeases(MemoryServiceTables):
    """:class:`MemoryServiceTables` with ``renew_many``."""

    async def renew_many(self, leases: Sequence[Lease], *, seconds: float) -> list[Renewal | None]:
        """Extend each of ``leases`` by ``seconds`` from now; None for each stale one."""
        if not leases:
            return []
        answers: list[Renewal | None] = []
        with self._lock:
            now = time.time()
            for lease in leases:
                try:
                    svc, turn = self._fenced(lease)
                except Fenced:
                    answers.append(None)
                    continue
                svc.expires = now + seconds
                new = Lease(lease.session, lease.holder, lease.epoch, svc.expires)
                answers.append(Renewal(new, turn.stop_requested))
        return answers
