"""A store wrapper for the service benchmarks: it counts every call, by verb, and can hide hints.

:func:`counting` wraps a store that has both the core :class:`~steerable.Store` verbs and the
:class:`~steerable.service_store.ServiceStore` ones. Every verb is passed through and counted;
``claim`` is counted as ``claim`` when it returned a turn and ``claim (none)`` when there was
nothing to claim, since the two cost the same but mean different things. ``hints`` is kept
only if the inner store has it and ``hints=True``: ``counting(store, hints=False)`` is the same
store made to look like one without notifications, so its replicas poll.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, Protocol

from steerable.messages import Message
from steerable.service_store import (
    Accepted,
    Claim,
    Entry,
    Hint,
    Input,
    InputState,
    InputView,
    Known,
    Lease,
    Notifying,
    Outcome,
    Renewal,
    ServiceEvent,
    ServiceStore,
    SessionState,
    SessionSummary,
    Status,
    TurnView,
)
from steerable.store import Steer, Store


class Both(Store, ServiceStore, Protocol):
    """A store with the service's tables: what every steerable backend is."""


class Counting:
    """``inner``'s verbs, each call counted in :attr:`calls`; no ``hints``."""

    def __init__(self, inner: Both) -> None:
        self.inner = inner
        self.__wrapped__ = inner  # the replica asks it which keywords its verbs take
        self.calls: Counter[str] = Counter()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({type(self.inner).__name__})"

    def dump(self, path: str | Path) -> None:
        """Write the counts to ``path`` as one JSON object (for a replica process)."""
        Path(path).write_text(json.dumps(dict(self.calls)), encoding="utf-8")

    # -- the core verbs --------------------------------------------------------------------

    async def messages(self, session: str) -> list[Message]:
        """Counted ``Store.messages``."""
        self.calls["messages"] += 1
        return await self.inner.messages(session)

    async def save(
        self, session: str, messages: Sequence[Message], *, at: int, take: int = 0
    ) -> list[Message]:
        """Counted ``Store.save``."""
        self.calls["save"] += 1
        return await self.inner.save(session, messages, at=at, take=take)

    async def steer(self, session: str, steer: Steer) -> None:
        """Counted ``Store.steer``."""
        self.calls["steer"] += 1
        await self.inner.steer(session, steer)

    async def take_steers(self, session: str, *, at: int | None, limit: int) -> list[Message]:
        """Counted ``Store.take_steers``."""
        self.calls["take_steers"] += 1
        return await self.inner.take_steers(session, at=at, limit=limit)

    async def steers(self, session: str) -> list[Steer]:
        """Counted ``Store.steers``."""
        self.calls["steers"] += 1
        return await self.inner.steers(session)

    # -- the service's verbs ---------------------------------------------------------------

    async def enqueue(
        self,
        session: str,
        input: Input,
        *,
        if_idle: bool = False,
        expected_turn: str | None = None,
        max_waiting: int | None = None,
    ) -> Accepted:
        """Counted ``ServiceStore.enqueue``."""
        self.calls["enqueue"] += 1
        return await self.inner.enqueue(
            session, input, if_idle=if_idle, expected_turn=expected_turn, max_waiting=max_waiting
        )

    async def cancel(self, session: str, id: str) -> InputView | None:
        """Counted ``ServiceStore.cancel``."""
        self.calls["cancel"] += 1
        return await self.inner.cancel(session, id)

    async def stopping(self, holder: str) -> list[str]:
        """Counted ``ServiceStore.stopping`` (the stop poll)."""
        self.calls["stopping"] += 1
        return await self.inner.stopping(holder)

    async def inputs(
        self, session: str, *, after: int, limit: int, state: InputState | None = None
    ) -> list[InputView]:
        """Counted ``ServiceStore.inputs``."""
        self.calls["inputs"] += 1
        return await self.inner.inputs(session, after=after, limit=limit, state=state)

    async def turns(self, session: str, *, after: int, limit: int) -> list[TurnView]:
        """Counted ``ServiceStore.turns``."""
        self.calls["turns"] += 1
        return await self.inner.turns(session, after=after, limit=limit)

    async def set_metadata(self, session: str, metadata: dict[str, Any]) -> None:
        """Counted ``ServiceStore.set_metadata``."""
        self.calls["set_metadata"] += 1
        await self.inner.set_metadata(session, metadata)

    async def claim(
        self,
        holder: str,
        *,
        seconds: float,
        cap: int,
        session: str | None = None,
        known: Mapping[str, Known] | None = None,
        first: bool = False,
    ) -> Claim | None:
        """Counted ``ServiceStore.claim``: ``claim``, or ``claim (none)`` when empty."""
        said: dict[str, Any] = {}  # only what was said: a store may predate the keywords
        if known:
            said["known"] = known
        if first:
            said["first"] = True
        try:
            claim = await self.inner.claim(
                holder, seconds=seconds, cap=cap, session=session, **said
            )
        except BaseException:
            self.calls["claim (failed)"] += 1
            raise
        self.calls["claim" if claim is not None else "claim (none)"] += 1
        return claim

    async def renew(self, lease: Lease, *, seconds: float) -> Renewal:
        """Counted ``ServiceStore.renew``."""
        self.calls["renew"] += 1
        return await self.inner.renew(lease, seconds=seconds)

    async def renew_many(self, leases: Sequence[Lease], *, seconds: float) -> list[Renewal | None]:
        """Counted ``ServiceStore.renew_many`` (one call, however many leases)."""
        self.calls["renew_many"] += 1
        return await self.inner.renew_many(leases, seconds=seconds)

    async def step(
        self,
        lease: Lease,
        messages: Sequence[Message],
        *,
        at: int,
        take: int,
        final: bool = False,
    ) -> list[Message]:
        """Counted ``ServiceStore.step``."""
        self.calls["step"] += 1
        return await self.inner.step(lease, messages, at=at, take=take, final=final)

    async def end_turn(
        self,
        lease: Lease,
        outcome: Outcome,
        *,
        last: Sequence[Message] = (),
        at: int | None = None,
    ) -> str | None:
        """Counted ``ServiceStore.end_turn`` (with the turn's last save, where it carries one)."""
        self.calls["end_turn"] += 1
        if last:
            return await self.inner.end_turn(lease, outcome, last=last, at=at)
        return await self.inner.end_turn(lease, outcome)

    async def stop(self, session: str) -> str | None:
        """Counted ``ServiceStore.stop``."""
        self.calls["stop"] += 1
        return await self.inner.stop(session)

    async def status(self, session: str, *, limit: int = 100) -> Status:
        """Counted ``ServiceStore.status``."""
        self.calls["status"] += 1
        return await self.inner.status(session, limit=limit)

    async def input(self, session: str, id: str) -> InputView | None:
        """Counted ``ServiceStore.input``."""
        self.calls["input"] += 1
        return await self.inner.input(session, id)

    async def turn(self, session: str, id: str) -> TurnView | None:
        """Counted ``ServiceStore.turn``."""
        self.calls["turn"] += 1
        return await self.inner.turn(session, id)

    async def transcript(self, session: str, *, after: int, limit: int) -> list[Entry]:
        """Counted ``ServiceStore.transcript``."""
        self.calls["transcript"] += 1
        return await self.inner.transcript(session, after=after, limit=limit)

    async def events(self, session: str, *, after: int, limit: int) -> list[ServiceEvent]:
        """Counted ``ServiceStore.events``."""
        self.calls["events"] += 1
        return await self.inner.events(session, after=after, limit=limit)

    async def sessions(
        self, *, prefix: str, after: str | None, limit: int, state: SessionState | None = None
    ) -> list[SessionSummary]:
        """Counted ``ServiceStore.sessions``."""
        self.calls["sessions"] += 1
        return await self.inner.sessions(prefix=prefix, after=after, limit=limit, state=state)


class CountingNotifying(Counting):
    """:class:`Counting` with the inner store's ``hints`` (entering them is counted once)."""

    def hints(self) -> AbstractAsyncContextManager[AsyncIterator[Hint]]:
        """The inner store's hints."""
        self.calls["hints"] += 1
        assert isinstance(self.inner, Notifying)
        return self.inner.hints()


def counting(inner: Both, *, hints: bool = True) -> Counting:
    """``inner`` with every call counted; with its hints only if it has them and ``hints``."""
    if hints and isinstance(inner, Notifying):
        return CountingNotifying(inner)
    return Counting(inner)


def notifies(store: object) -> bool:
    """Whether a service over ``store`` would listen for hints rather than only poll."""
    return isinstance(store, Notifying)
