"""A turn's view of the store: the core :class:`~steerable.Store` verbs, fenced by its lease.

The core loop saves through a :class:`~steerable.Session`; under the service that session's
store is this view, so every save-and-take of a step becomes one ``ServiceStore.step`` call
that carries the turn's lease. The first transcript read is answered from the claim (the
claim read it already), so a turn costs no read of its own.
"""

from __future__ import annotations

from collections.abc import Sequence

from steerable.errors import Fenced, StoreUnavailable, UsageError
from steerable.messages import Message
from steerable.service_store import Input, Lease, ServiceStore
from steerable.store import Steer, Store


class LeaseCell:
    """The current lease of a turn (renewals replace it) and whether it was lost."""

    __slots__ = ("fenced", "lease", "store_failed")

    def __init__(self, lease: Lease) -> None:
        self.lease = lease
        self.fenced = False
        self.store_failed = False  # a write failed on the store: the turn is carried on


class FencedStore:
    """The :class:`~steerable.Store` verbs of one turn's session, every write fenced."""

    __slots__ = ("_cell", "_claimed", "_service", "_session", "_store")

    def __init__(
        self, store: Store, service: ServiceStore, cell: LeaseCell, claimed: list[Message]
    ) -> None:
        self._store = store
        self._service = service
        self._cell = cell
        self._session = cell.lease.session
        self._claimed: list[Message] | None = claimed

    def _mine(self, session: str) -> None:
        if session != self._session:
            raise UsageError(f"this turn's store serves session {self._session!r}, not {session!r}")

    async def messages(self, session: str) -> list[Message]:
        """The transcript: the claim's copy the first time, the store's after."""
        self._mine(session)
        if self._claimed is not None:
            claimed, self._claimed = self._claimed, None
            return list(claimed)
        return await self._store.messages(session)

    async def save(
        self, session: str, messages: Sequence[Message], *, at: int, take: int = 0
    ) -> list[Message]:
        """The step's save-and-take, one fenced store call."""
        self._mine(session)
        self._claimed = None
        lease = self._cell.lease
        if self._cell.fenced:  # lost or abandoned: refused here, without a store call
            raise Fenced(lease.session, lease.epoch, None)
        try:
            return await self._service.step(lease, messages, at=at, take=take)
        except Fenced:
            self._cell.fenced = True
            raise
        except StoreUnavailable:
            self._cell.store_failed = True
            raise

    async def take_steers(self, session: str, *, at: int | None, limit: int) -> list[Message]:
        """Take the turn's steers at ``at`` (or at the transcript's end), fenced."""
        if at is None:
            at = len(await self.messages(session))
        return await self.save(session, (), at=at, take=limit)

    async def steer(self, session: str, steer: Steer) -> None:
        """A steer left by the run (one its box did not apply) waits as a steer input."""
        self._mine(session)
        await self._service.enqueue(session, Input("steer", steer.text, steer.id))

    async def steers(self, session: str) -> list[Steer]:
        """The steers waiting for this turn, oldest first."""
        self._mine(session)
        status = await self._service.status(session)
        turn = status.turn.id if status.turn else None
        return [Steer(w.text, w.id) for w in status.waiting if w.turn == turn and turn]
