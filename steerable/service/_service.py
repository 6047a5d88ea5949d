"""The service's front door: the verbs anyone may call, and the replica that serves turns.

``Service(store, agent)`` over a store with the service's tables (every store of steerable
has them). Its verbs (``send``, ``steer``, ``stop`` and the views) work from any process,
with or without serving: a web front end can take requests and leave the turns to other
replicas. ``async with service.serving():`` (or ``await service.serve()``) makes this process
a replica too. Every argument is checked here, once, and the store trusts what it is passed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import socket
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from steerable import telemetry
from steerable.errors import UsageError
from steerable.messages import new_id
from steerable.service._held import Held
from steerable.service._observe import Observer
from steerable.service._replica import LiveSink, Replica, Settings
from steerable.service.agent import Agent
from steerable.service_store import (
    INPUT_STATES,
    Accepted,
    Entry,
    Input,
    InputKind,
    InputState,
    InputView,
    ServiceEvent,
    ServiceStore,
    Status,
    TurnView,
)
from steerable.store import Forkable, Rewritable, Store, check_session_id

__all__ = ["MAX_ID", "MAX_METADATA", "MAX_PAGE", "MAX_TEXT", "Service"]

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

MAX_METADATA = 16_384
"""The most bytes of an input's or a session's metadata, as compact JSON."""


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


def _metadata(value: object) -> dict[str, Any]:
    """A copy of ``value`` if it is a JSON object of at most :data:`MAX_METADATA` bytes."""
    if not isinstance(value, dict):
        raise UsageError(f"metadata is a dict (a JSON object), not {type(value).__name__}")
    try:
        encoded = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        size = len(encoded.encode("utf-8"))
    except (TypeError, ValueError, UnicodeEncodeError) as exc:
        raise UsageError(f"metadata must be plain JSON (str keys, no NaN): {exc}") from None
    if size > MAX_METADATA:
        raise UsageError(f"metadata has at most {MAX_METADATA} bytes as JSON, not {size}")
    copy: dict[str, Any] = json.loads(encoded)
    return copy


def _input(kind: InputKind, text: object, id: object, metadata: object = None) -> Input:
    if not isinstance(text, str):
        raise UsageError(f"an input's text is a str, not {type(text).__name__}")
    if len(_encodable(text, "the text").encode("utf-8")) > MAX_TEXT:
        raise UsageError(f"an input's text has at most {MAX_TEXT} bytes of UTF-8")
    meta = {} if metadata is None else _metadata(metadata)
    return Input(kind, text, new_id() if id is None else _id(id), meta, telemetry.carrier())


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
    dies is taken over after at most ``lease`` seconds.
    An idle replica looks for work every ``poll`` seconds (and at once on a hint), and
    runs at most ``concurrency`` turns at a time. ``live`` receives the live events
    (text deltas included) of the turns this replica runs; a ``live`` that raises is logged
    once per turn and never fails the turn. A failed turn is logged (with its traceback)
    and records a stable code in its ``error`` rather than the agent's own text, which
    can name hosts and keys; ``error_detail=True`` records the text, for development.
    ``max_waiting`` bounds the inputs waiting in one session (a send or steer beyond it is
    refused with :class:`~steerable.QueueFull`; None: no bound). Where the store has no
    notifications the replica asks it every ``stop_poll`` seconds which of its turns were
    asked to stop, so a stop reaches the holder within about that (at once where the
    store notifies). ``wake`` is called with a session's id after each write of this
    process that adds durable events to it (a live feed's ``wake``: event streams then read
    them at once; :func:`~steerable.service.http.create_app` sets it to its feed's).
    When serving ends, the turns under way are abandoned and their leases released, so
    another replica carries them on at once. A replica keeps the transcripts of the
    sessions it served, up to ``held_messages`` messages in all (0: none), so that its next
    claim of one reads only the messages stored since (every turn of a long session would
    otherwise read and decode the whole transcript again).
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
        max_waiting: int | None = 1000,
        stop_poll: float = 0.2,
        wake: Callable[[str], object] | None = None,
        observers: Sequence[Observer] = (),
        held_messages: int = 100_000,
    ) -> None:
        if not isinstance(store, ServiceStore) or not isinstance(store, Store):
            missing = [
                name
                for protocol in (Store, ServiceStore)
                for name, value in vars(protocol).items()
                if callable(value) and not name.startswith("_") and not hasattr(store, name)
            ]
            raise UsageError(
                f"a Service needs a store with the service's tables, not {type(store).__name__}"
                f" (it lacks {', '.join(missing)})"
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
        if max_waiting is not None and (type(max_waiting) is not int or max_waiting < 1):
            raise UsageError(f"`max_waiting` is an int >= 1 or None, not {max_waiting!r}")
        self.max_waiting = max_waiting
        if type(held_messages) is not int or held_messages < 0:
            raise UsageError(f"`held_messages` is an int >= 0, not {held_messages!r}")
        if wake is not None and not callable(wake):
            raise UsageError(f"`wake` is a callable of a session id, not {wake!r}")
        self.wake = wake
        if not all(isinstance(o, Observer) for o in observers):
            raise UsageError(
                f"an observer has claimed, steers_taken, fenced and turn_ended: {observers!r}"
            )
        self.observers = tuple(observers)
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
            _seconds(stop_poll, "stop_poll"),
            held_messages,
        )
        self._live = live
        self._held = Held(held_messages)  # kept from one serving() to the next
        self.replica: Replica | None = None

    def __repr__(self) -> str:
        return f"Service({type(self.store).__name__}, replica={self.settings.replica!r})"

    # -- inputs ---------------------------------------------------------------------------

    async def send(
        self,
        session: str,
        text: str,
        *,
        id: str | None = None,
        metadata: dict[str, Any] | None = None,
        if_idle: bool = False,
    ) -> Accepted:
        """Queue ``text`` as a turn of its own; it starts now if no turn runs.

        ``if_idle``: only if no turn runs and no input waits, else
        :class:`~steerable.SessionNotIdle` and nothing is sent (an atomic "start if idle").
        """
        if not isinstance(if_idle, bool):
            raise UsageError(f"`if_idle` is True or False, not {if_idle!r}")
        sid = _session(session)
        with telemetry.input_span("send", sid, id) as span:
            accepted = await self.store.enqueue(
                sid,
                _input("send", text, id, metadata),
                if_idle=if_idle,
                max_waiting=self.max_waiting,
            )
            _accepted(span, accepted)
        self._woke(sid, not accepted.duplicate)
        return accepted

    async def steer(
        self,
        session: str,
        text: str,
        *,
        id: str | None = None,
        metadata: dict[str, Any] | None = None,
        expected_turn: str | None = None,
    ) -> Accepted:
        """Offer ``text`` to the started turn's next step; ``turn`` None: a turn of its own.

        The started turn is the running one, or, when none runs, the one the next claim
        starts. An offer is not a promise: a turn that ends (its answer written) before its
        next step frees the steer to be a turn of its own; :meth:`fate` tells which.
        ``expected_turn``: only if the steer joins that turn, else
        :class:`~steerable.TurnMismatch` and nothing is recorded.
        """
        expected = None if expected_turn is None else _id(expected_turn)
        sid = _session(session)
        with telemetry.input_span("steer", sid, id) as span:
            accepted = await self.store.enqueue(
                sid,
                _input("steer", text, id, metadata),
                expected_turn=expected,
                max_waiting=self.max_waiting,
            )
            _accepted(span, accepted)
        self._woke(sid, not accepted.duplicate)
        return accepted

    async def stop(self, session: str) -> str | None:
        """Stop the running turn, from any replica; its id, or None when none runs."""
        sid = _session(session)
        turn = await self.store.stop(sid)
        self._woke(sid, turn is not None)
        return turn

    async def cancel(self, session: str, id: str) -> InputView | None:
        """Take back the waiting input ``id``; its view after (unchanged if it was answered)."""
        sid = _session(session)
        view = await self.store.cancel(sid, _id(id))
        self._woke(sid, view is not None and view.state == "cancelled")
        return view

    def _woke(self, session: str, wrote: bool) -> None:
        if wrote:
            self._wrote(session)

    def _wrote(self, session: str) -> None:
        """Tell ``wake`` (if any) that this process wrote events to ``session``; also the
        replica's, so a wake set after the Service was made (by the app) still counts."""
        if self.wake is not None:
            try:
                self.wake(session)
            except Exception:  # a wake is a hint: streams poll anyway
                log.exception("the wake of session %r failed", session)

    async def set_metadata(self, session: str, metadata: dict[str, Any]) -> None:
        """Replace the session's metadata (a JSON object of at most MAX_METADATA bytes)."""
        await self.store.set_metadata(_session(session), _metadata(metadata))

    async def fork(
        self,
        session: str,
        new: str,
        *,
        at: str | None = None,
        text: str | None = None,
        id: str | None = None,
    ) -> tuple[int, Accepted | None]:
        """Start ``new`` from ``session``'s transcript through message ``at`` (all of it when
        None); with ``text``, send it to ``new`` then: the conversation goes on from there
        (resume at a message). How many messages were copied, and the send's answer.

        Nothing but the transcript is copied: the steers and inputs waiting on ``session``
        stay there. :class:`~steerable.MessageNotFound` when ``at`` is not in the transcript,
        :class:`~steerable.SessionExists` when ``new`` has anything; the store must be
        :class:`~steerable.store.Forkable` (every store of steerable is).
        """
        old, fresh = _session(session), _session(new)
        if old == fresh:
            raise UsageError("a session cannot be forked into itself")
        through = None if at is None else _id(at)
        if text is not None:
            _input("send", text, id)  # checked before anything is written
        if not isinstance(self.store, Forkable):
            raise UsageError(f"{type(self.store).__name__} cannot fork a session")
        copied = await self.store.fork(old, fresh, through=through)
        sent = None if text is None else await self.send(fresh, text, id=id)
        return copied, sent

    async def delete(self, session: str) -> bool:
        """Forget the session: transcript, inputs, turns, events, metadata; True if it had any.

        Refused with :class:`~steerable.SessionBusy` while a turn runs (stop it first); the
        store must be :class:`~steerable.store.Rewritable` (every store of steerable is).
        """
        if not isinstance(self.store, Rewritable):
            raise UsageError(f"{type(self.store).__name__} cannot delete a session")
        return await self.store.delete(_session(session))

    # -- views ----------------------------------------------------------------------------

    async def status(self, session: str, *, limit: int = 100) -> Status:
        """The running turn, the first ``limit`` waiting inputs and the counts (empty: not
        an error)."""
        return await self.store.status(_session(session), limit=_page(limit, "limit"))

    async def inputs(
        self, session: str, *, after: int = 0, limit: int = 100, state: InputState | None = None
    ) -> list[InputView]:
        """Up to ``limit`` inputs after ``seq`` ``after``, in order (only ``state``, if given)."""
        if state is not None and state not in INPUT_STATES:
            raise UsageError(f"`state` is one of {INPUT_STATES} or None, not {state!r}")
        return await self.store.inputs(
            _session(session), after=_after(after, low=0), limit=_page(limit, "limit"), state=state
        )

    async def turns(self, session: str, *, after: int = 0, limit: int = 100) -> list[TurnView]:
        """Up to ``limit`` turns that started, in order, after the prompt ``seq`` ``after``."""
        return await self.store.turns(
            _session(session), after=_after(after, low=0), limit=_page(limit, "limit")
        )

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

    async def fate(self, session: str, id: str, *, seconds: float) -> InputView | None:
        """The input ``id`` once its fate is known, or as it is when ``seconds`` have passed.

        Known: taken (by ``turn`` at ``step``), a prompt (its own turn), cancelled, or waiting
        with no turn offered it (it will be a turn of its own). A steer offered to a turn is
        still undecided: the turn takes it at its next step, or frees it as it ends.
        """
        sid, iid = _session(session), _id(id)
        deadline = time.monotonic() + _seconds(seconds, "seconds")
        pause = 0.02
        while True:
            view = await self.store.input(sid, iid)
            left = deadline - time.monotonic()
            if view is None or not _undecided(view) or left <= 0:
                return view
            await asyncio.sleep(min(pause, left))
            pause = min(pause * 2, self.settings.poll, 0.25)

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
        replica = Replica(
            self._core,
            self.store,
            self.agent,
            self.settings,
            self._live,
            wake=self._wrote,
            observers=self.observers,
            held=self._held,
        )
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


def _accepted(span: Any, accepted: Accepted) -> None:
    """What ``enqueue`` answered, on the input's span (None when nothing records)."""
    if span is None:
        return
    span.set_attribute("steerable.input.id", accepted.id)
    span.set_attribute("steerable.input.seq", accepted.seq)
    span.set_attribute("steerable.input.ahead", accepted.ahead)
    span.set_attribute("steerable.input.duplicate", accepted.duplicate)
    if accepted.turn is not None:
        span.set_attribute("steerable.input.offered_turn", accepted.turn)


def _undecided(view: InputView) -> bool:
    """Whether an input's fate is still open: waiting, and offered to a turn."""
    return view.state == "waiting" and view.turn is not None


def _replica_ended(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("the replica stopped serving", exc_info=task.exception())
