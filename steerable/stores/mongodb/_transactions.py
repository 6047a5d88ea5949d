"""How every service write of the MongoDB store is made atomic: one transaction, locked on
the session's service document, run again after a write conflict.

Every write verb (enqueue, cancel, claim, step, end_turn, stop; truncate and delete in
:mod:`._rewrite`) is one transaction, and every one first writes the session's service
document (:meth:`ServiceTransactions._lock`), fenced in its filter (epoch, holder, a
running turn) where a lease is carried. Two writes of one session therefore conflict on
that document: MongoDB (and SecantusDB, the server the tests run) aborts one with a
``WriteConflict`` and the store runs it again, on a fresh snapshot, where its filter sees
the winner's write (a bounded number of times; not ``with_transaction``, which would also
retry a lost connection for two minutes). A write may read before it locks: the snapshot
is taken at its first read, and any write of the session committed since conflicts with
the lock. So exactly one of many claimers wins, a stale holder is refused with nothing
written (:class:`~steerable.errors.Fenced`), and a step's messages, taken steers, turn
counters and events commit together or not at all. A refusal raised in the transaction
(a condition of an enqueue, a fence) aborts it: nothing it wrote is kept.

Transactions need a replica set or a sharded cluster (a one-node replica set will do):
the service cannot run on a standalone ``mongod``, though the core :class:`steerable.Store`
verbs still do. The collections are made by the migration: a transaction may not create
one before 4.4.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar

from pymongo import ReturnDocument
from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import ConnectionFailure, PyMongoError

from steerable.errors import Fenced, StoreError
from steerable.service_store import Lease
from steerable.stores.mongodb import _layout as layout
from steerable.stores.mongodb._documents import NOW, Doc

if TYPE_CHECKING:
    from pymongo.asynchronous.database import AsyncDatabase

_T = TypeVar("_T")
RETRIES: Final = 5  # rounds of a write whose document was missing or raced
_CONFLICT_RETRIES: Final = 100  # each round, one of the conflicting writers commits


def _conflict(exc: BaseException) -> bool:
    """Whether ``exc`` is a write conflict (run the transaction again), not an outage."""
    return (
        isinstance(exc, PyMongoError)
        and not isinstance(exc, ConnectionFailure)
        and exc.has_error_label("TransientTransactionError")
    )


class Raced(Exception):
    """Another writer inserted the same document first; the transaction is run again."""


class Missing(Exception):
    """The session has no service document yet; it is created and the write run again."""


class Events:
    """The events one write appends, numbered after the session's counter, timed by its
    lock (the service document's ``now``)."""

    def __init__(self, session: str, service: Doc) -> None:
        self.session, self.next, self.at = session, int(service["ev"]) + 1, int(service["now"])
        self.docs: list[Doc] = []

    def add(self, kind: str, turn: str | None, data: Doc, hint: str | None = None) -> None:
        """Append an event of ``kind``; ``hint`` makes it a hint of that kind too."""
        doc: Doc = {"_id": {"s": self.session, "n": self.next}, "s": self.session}
        doc |= {"n": self.next, "k": kind, "t": turn, "d": json.dumps(data), "at": self.at}
        if hint is not None:
            doc["hint"] = hint
        self.docs.append(doc)
        self.next += 1

    async def write(self, events: AsyncCollection[Any], s: AsyncClientSession) -> None:
        """Insert the events, in the transaction ``s``."""
        if self.docs:
            await events.insert_many(self.docs, session=s)


class ServiceTransactions:
    """The service's collections of :class:`MongoStore` and its transactions over them."""

    if TYPE_CHECKING:  # provided by MongoStore
        db: AsyncDatabase[Any]
        _heads: AsyncCollection[Any]

        async def _check_migrated(self) -> None: ...

    @property
    def _service(self) -> AsyncCollection[Any]:
        return self.db[layout.SERVICE]

    @property
    def _inputs(self) -> AsyncCollection[Any]:
        return self.db[layout.INPUTS]

    @property
    def _turns(self) -> AsyncCollection[Any]:
        return self.db[layout.TURNS]

    @property
    def _events(self) -> AsyncCollection[Any]:
        return self.db[layout.EVENTS]

    async def _transaction(self, body: Callable[[AsyncClientSession], Awaitable[_T]]) -> _T:
        """Run ``body`` in one transaction, again (on a fresh snapshot) after a conflict.

        Not ``with_transaction``: it retries every ``TransientTransactionError`` for two
        minutes, a lost connection included, where a store must say at once that the
        database cannot be reached. Only a conflict with another writer is run again.
        """
        await self._check_migrated()
        async with self.db.client.start_session() as s:
            for attempt in range(_CONFLICT_RETRIES):
                await s.start_transaction()
                try:
                    result = await body(s)
                    await s.commit_transaction()
                except BaseException as exc:
                    if s.in_transaction:
                        await s.abort_transaction()
                    if not _conflict(exc):
                        raise
                    await asyncio.sleep(random.uniform(0, 0.002 * (attempt + 1)))
                    continue
                return result
        raise StoreError(f"a transaction conflicted {_CONFLICT_RETRIES} times in a row")

    async def _lock(self, s: AsyncClientSession, query: Doc, *sets: Doc) -> Doc | None:
        """Write the session's service document if it matches ``query``: the write's lock.

        ``now`` takes the server's clock first, for the pipeline stages after it and for the
        events. A concurrent write of the same session conflicts here.
        """
        doc: Doc | None = await self._service.find_one_and_update(
            query,
            [{"$set": {"now": NOW}}, *({"$set": part} for part in sets)],
            return_document=ReturnDocument.AFTER,
            session=s,
        )
        return doc

    async def _fence(self, s: AsyncClientSession, lease: Lease, *sets: Doc) -> Doc:
        """The service document, locked, if ``lease`` still holds it; Fenced otherwise."""
        query = {"_id": lease.session, "ep": lease.epoch, "h": lease.holder}
        doc = await self._lock(s, query | {"run": {"$ne": None}}, *sets)
        if doc is None:
            current = await self._service.find_one({"_id": lease.session}, {"ep": 1}, session=s)
            raise Fenced(lease.session, lease.epoch, int(current["ep"]) if current else None)
        return doc

    async def _first_queued(self, session: str, s: AsyncClientSession | None) -> Doc | None:
        """The head of the queue: the first input waiting to be a turn."""
        found: Doc | None = await self._inputs.find_one(
            {"s": session, "st": "waiting", "t": None}, sort=[("n", 1)], session=s
        )
        return found

    async def _offered(
        self,
        s: AsyncClientSession,
        service: Doc,
        turn: str,
        limit: int = 0,
        fields: Doc | None = None,
    ) -> list[Doc]:
        """The waiting inputs offered to ``turn``, in order (at most ``limit``; 0: all),
        with ``fields`` only if given.

        No read when the service document says none is offered (``wt`` - ``q``, see
        :mod:`._documents`).
        """
        if int(service["wt"]) <= int(service["q"]):
            return []
        query = {"s": service["_id"], "st": "waiting", "t": turn}
        found = self._inputs.find(query, fields, session=s)
        docs: list[Doc] = await found.sort("n", 1).limit(limit).to_list(None)
        return docs

    async def _length(self, session: str, s: AsyncClientSession) -> int:
        """How many messages the session's transcript holds."""
        head = await self._heads.find_one({"_id": session}, {"n": 1}, session=s)
        return int(head["n"]) if head else 0
