"""The service's front door: the verbs anyone may call, and the replica that serves turns.

``Service(store, agent)`` over a store with the service's tables (every store of steerable
has them). Its verbs (``send``, ``steer``, ``stop`` and the views) work from any process,
with or without serving: a web front end can take requests and leave the turns to other
replicas. ``async with service.serving():`` (or ``await service.serve()``) makes this process
a replica too. Every argument is checked here, once, and the store trusts what it is passed.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from steerable.errors import UsageError
from steerable.service._replica import LiveSink, Replica, Settings
from steerable.service.agent import Agent
from steerable.service_store import (
    Accepted,
    Entry,
    Input,
    InputKind,
    InputView,
    ServiceEvent,
    ServiceStore,
    Status,
    TurnView,
)
from steerable.store import Store, check_session_id

__all__ = ["MAX_ID", "MAX_PAGE", "MAX_TEXT", "Service"]

log = logging.getLogger("steerable.service")

_OVER = ("completed", "stopped", "failed", "max_steps")


def _seconds(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise UsageError(f"`{what}` is a number of seconds, not {value!r}")
    if value <= 0:
        raise UsageError(f"`{what}` is a number of seconds > 0, not {value!r}")
    return float(value)


MAX_ID = 255
"""The longest session, input or turn id, in characters: one bound that every store keeps."""

MAX_TEXT = 1_000_000
"""The longest input text, in UTF-8 bytes: one bound below every store's own limits."""

MAX_PAGE = 1000
"""The most messages or events one view call returns."""


def _encodable(value: str, what: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(
            f"{what} is not valid unicode (a lone surrogate?): {value!r:.80}"
        ) from None
    return value


def _session(session: object) -> str:
    sid = check_session_id(session)
    if len(sid) > MAX_ID:
        raise UsageError(f"a session id has at most {MAX_ID} characters, not {len(sid)}")
    return _encodable(sid, "the session id")


def _id(id: object) -> str:
    if not isinstance(id, str) or not id or "\x00" in id:
        raise UsageError(f"an id is a non-empty str without NUL, not {id!r:.80}")
    if len(id) > MAX_ID:
        raise UsageError(f"an id has at most {MAX_ID} characters, not {len(id)}")
    return _encodable(id, "the id")


def _input(kind: InputKind, text: object, id: object) -> Input:
    if not isinstance(text, str):
        raise UsageError(f"an input's text is a str, not {type(text).__name__}")
    if len(_encodable(text, "the text").encode("utf-8")) > MAX_TEXT:
        raise UsageError(f"an input's text has at most {MAX_TEXT} bytes of UTF-8")
    return Input(kind, text) if id is None else Input(kind, text, _id(id))


def _page(value: object, what: str, *, low: int = 0) -> int:
    if type(value) is not int or not low <= value <= MAX_PAGE:
        raise UsageError(f"`{what}` is an int from {low} to {MAX_PAGE}, not {value!r}")
    return value


def _after(value: object, *, low: int) -> int:
    if type(value) is not int or not low <= value < 2**62:
        raise UsageError(f"`after` is an int from {low} up, not {value!r}")
    return value


class Service:
    """A session as a queue of turns, served by any number of replicas over one store.

    ``agent`` is what turns run (needed only to serve). ``replica`` names this process in
    leases (host and pid by default). A lease lasts ``lease`` seconds on the database's
    clock and is renewed every ``renew_every`` (a third of it by default): a replica that
    dies is taken over after at most ``lease`` seconds, and a stop reaches the holder
    within ``renew_every`` where the store has no notifications (at once where it has).
    An idle replica looks for work every ``poll`` seconds (and at once on a hint), and
    runs at most ``concurrency`` turns at a time. ``live`` receives the live events
    (text deltas included) of the turns this replica runs; a ``live`` that raises is logged
    once per turn and never fails the turn. A failed turn is logged (with its traceback)
    and records a stable code in its ``error`` rather than the agent's own text, which
    can name hosts and keys; ``error_detail=True`` records the text, for development.
    When serving ends, the turns under way are abandoned and their leases released, so
    another replica carries them on at once.
    """

    def __init__(
        self,
        store: ServiceStore,
        agent: Agent | None = None,
        *,
        replica: str | None = None,
        lease: float = 15.0,
        renew_every: float | None = None,
        poll: float = 1.0,
        concurrency: int = 16,
        live: LiveSink | None = None,
        error_detail: bool = False,
    ) -> None:
        if not isinstance(store, ServiceStore) or not isinstance(store, Store):
            raise UsageError(
                f"a Service needs a store with the service's tables, not {type(store).__name__}"
            )
        if agent is not None and not (
            callable(getattr(agent, "run_turn", None)) and hasattr(agent, "steers_per_turn")
        ):
            raise UsageError(f"agent has no run_turn(turn) and steers_per_turn: {agent!r}")
        cap = getattr(agent, "steers_per_turn", 0)
        if type(cap) is not int or cap < 0:
            raise UsageError(f"an agent's steers_per_turn is an int >= 0, not {cap!r}")
        lease = _seconds(lease, "lease")
        renew = lease / 3 if renew_every is None else _seconds(renew_every, "renew_every")
        if renew >= lease:
            raise UsageError(f"renew_every ({renew}) must be shorter than the lease ({lease})")
        if type(concurrency) is not int or concurrency < 1:
            raise UsageError(f"`concurrency` is an int >= 1, not {concurrency!r}")
        if replica is not None and (not isinstance(replica, str) or not replica):
            raise UsageError(f"`replica` is a non-empty str, not {replica!r}")
        if not isinstance(error_detail, bool):
            raise UsageError(f"`error_detail` is True or False, not {error_detail!r}")
        self.store: ServiceStore = store
        self._core: Store = store
        self.agent = agent
        self.settings = Settings(
            replica or f"{socket.gethostname()}:{os.getpid()}",
            lease,
            renew,
            _seconds(poll, "poll"),
            concurrency,
            error_detail,
        )
        self._live = live
        self.replica: Replica | None = None

    def __repr__(self) -> str:
        return f"Service({type(self.store).__name__}, replica={self.settings.replica!r})"

    # -- inputs ---------------------------------------------------------------------------

    async def send(self, session: str, text: str, *, id: str | None = None) -> Accepted:
        """Queue ``text`` as a turn of its own; it starts now if no turn runs."""
        return await self.store.enqueue(_session(session), _input("send", text, id))

    async def steer(self, session: str, text: str, *, id: str | None = None) -> Accepted:
        """Offer ``text`` to the running turn's next step; ``turn`` None: a turn of its own."""
        return await self.store.enqueue(_session(session), _input("steer", text, id))

    async def stop(self, session: str) -> str | None:
        """Stop the running turn, from any replica; its id, or None when none runs."""
        return await self.store.stop(_session(session))

    # -- views ----------------------------------------------------------------------------

    async def status(self, session: str) -> Status:
        """The running turn, the waiting inputs and the queue length (empty: not an error)."""
        return await self.store.status(_session(session))

    async def input(self, session: str, id: str) -> InputView | None:
        """The input ``id`` and its fate, or None."""
        return await self.store.input(_session(session), _id(id))

    async def turn(self, session: str, id: str) -> TurnView | None:
        """The turn ``id``, or None."""
        return await self.store.turn(_session(session), _id(id))

    async def wait(self, session: str, id: str, *, seconds: float) -> TurnView | None:
        """The turn ``id`` once it has ended, or as it is when ``seconds`` have passed."""
        sid, tid = _session(session), _id(id)
        deadline = time.monotonic() + _seconds(seconds, "seconds")
        pause = 0.02
        while True:
            view = await self.store.turn(sid, tid)
            left = deadline - time.monotonic()
            if view is None or view.state in _OVER or left <= 0:
                return view
            await asyncio.sleep(min(pause, left))
            pause = min(pause * 2, self.settings.poll, 0.5)

    async def transcript(self, session: str, *, after: int = -1, limit: int = 100) -> list[Entry]:
        """Up to ``limit`` messages after position ``after``, each with its turn."""
        return await self.store.transcript(
            _session(session), after=_after(after, low=-1), limit=_page(limit, "limit")
        )

    async def events(self, session: str, *, after: int = 0, limit: int = 100) -> list[ServiceEvent]:
        """Up to ``limit`` durable events with ids above ``after``."""
        return await self.store.events(
            _session(session),
            after=_after(after, low=0),
            limit=_page(limit, "limit"),
        )

    # -- serving ----------------------------------------------------------------------------

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[Replica]:
        """Serve turns in the background while the context is open; abandon them after."""
        if self.agent is None:
            raise UsageError("a Service serves turns only with an agent: Service(store, agent)")
        if self.replica is not None:
            raise UsageError("this Service is serving already")
        replica = Replica(self._core, self.store, self.agent, self.settings, self._live)
        self.replica = replica
        task = asyncio.create_task(replica.run())
        task.add_done_callback(_replica_ended)
        try:
            yield replica
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            self.replica = None

    async def serve(self) -> None:
        """Serve turns until cancelled."""
        async with self.serving():
            await asyncio.Event().wait()


def _replica_ended(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("the replica stopped serving", exc_info=task.exception())
