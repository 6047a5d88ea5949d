"""The MongoDB store's renewal of many leases at once: one bulk write and one read.

Each lease is one update in an unordered ``bulk_write`` (one command, one round trip),
filtered as ``renew`` filters it (the session's service document at the lease's epoch and
holder, with a running turn) and extended to the server's ``$$NOW`` plus the seconds; a
stale lease's filter matches nothing, and the others go on. A bulk write does not say
which of its updates matched, so one ``find`` of the sessions' documents follows: a lease
that holds there was renewed by the update (an epoch only grows, and a turn that ended
starts again only under a new one), and its document gives the expiry and the stop flag.
A lease whose turn ended between the two is answered None, as a renewal after that end
would be.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pymongo import UpdateOne

from steerable.service_store import Lease, Renewal
from steerable.stores.mongodb._documents import NOW
from steerable.stores.mongodb._errors import reaching
from steerable.stores.mongodb._service import MongoServiceTables


def _holds(doc: Any, lease: Lease) -> bool:
    """Whether the service document ``doc`` is held by ``lease``, with a running turn."""
    running = doc.get("run") is not None
    return running and (int(doc["ep"]), doc.get("h")) == (lease.epoch, lease.holder)


class MongoLeases(MongoServiceTables):
    """:class:`MongoServiceTables` with ``renew_many``."""

    async def renew_many(self, leases: Sequence[Lease], *, seconds: float) -> list[Renewal | None]:
        """Extend each of ``leases`` by ``seconds`` from now; None for each stale one."""
        if not leases:
            return []
        extend = [{"$set": {"x": {"$add": [NOW, round(seconds * 1000)]}}}]
        unique = sorted({(lease.session, lease.epoch, lease.holder) for lease in leases})
        updates = [
            UpdateOne({"_id": session, "ep": epoch, "h": holder, "run": {"$ne": None}}, extend)
            for session, epoch, holder in unique
        ]
        sessions = sorted({lease.session for lease in leases})
        with reaching(f"renew {len(leases)} leases"):
            await self._check_migrated()
            await self._service.bulk_write(updates, ordered=False)
            found: dict[str, Any] = {
                doc["_id"]: doc
                async for doc in self._service.find(
                    {"_id": {"$in": sessions}}, {"ep": 1, "h": 1, "run": 1, "x": 1, "sr": 1}
                )
            }
        answers: list[Renewal | None] = []
        for lease in leases:
            doc = found.get(lease.session)
            if doc is None or not _holds(doc, lease):
                answers.append(None)
            else:
                new = Lease(lease.session, lease.holder, lease.epoch, int(doc["x"]) / 1000)
                answers.append(Renewal(new, bool(doc.get("sr"))))
        return answers
