"""A replica: claims sessions with work, runs their turns, renews their leases, ends them.

One loop claims: first the sessions a hint named (a send to an idle session, a turn that
ended with an input waiting), then any session with work, again at once while it finds
some; when it finds none, or has claimed the sessions hints named, it waits for a hint or
the poll interval, whichever comes first (a claim that finds nothing is a store call
spent: a turn's end wakes the loop only if it was waiting for room, and a hint that came
before this replica's last claim of its session is passed over). Each claimed turn runs in
a task of its own. One renewal task renews every lease the replica holds, every
``renew_every``, in one store call (``renew_many``) per :data:`RENEW_BATCH` leases: a
replica running a thousand turns that wait on slow tools makes ten calls an interval, not
a thousand. The renewal also carries the stop: it answers, per lease, whether a stop was
asked, and a ``stop`` hint makes it renew that turn's lease at once. A lease the renewal
finds stale means another replica holds the session now: that turn alone is stopped and
nothing more is recorded from it (its writes would be refused anyway). A turn's end is
recorded once, by the holder, with a retry while the store is away; a holder that cannot
record it leaves it to whoever claims the session next.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from steerable import telemetry
from steerable.errors import Fenced, InvalidMessage, StoreError, TranscriptConflict
from steerable.events import Event, EventSink
from steerable.messages import Message
from steerable.service._failure import failure, reported
from steerable.service._fenced import FencedStore, First, LeaseCell, Pending
from steerable.service._held import Held
from steerable.service._observe import LogObserver, Observer, Observers, TurnReport
from steerable.service.agent import Agent, Turn
from steerable.service_store import Claim, Notifying, Outcome, Renewal, ServiceStore
from steerable.session import Session
from steerable.store import Store

log = logging.getLogger("steerable.service")

_RELEASE = 2.0
"""How long a release of a lease at shutdown may take before the lease is left to expire."""

_TRIED = 10_000
"""How many sessions' last claim times a replica keeps to skip hints it answered already."""

RENEW_BATCH = 100
"""The most leases one renewal call carries (so one call per this many turns held): on
Postgres a lease cost 22 µs of the server's CPU in calls of 100, 36 µs in calls of 500
(``bench/capacity.py``, 2026-12-04)."""

_I = TypeVar("_I")

LiveSink = Callable[[str, str, Event], object]
"""Where a replica sends the live events of the turns it runs: ``(session, turn, event)``."""


@dataclass
class Counters:
    """What a replica did, for tests, benchmarks and operators."""

    claims: int = 0
    resumed: int = 0
    ended: int = 0
    fenced: int = 0
    recorded_on_takeover: int = 0
    store_errors: int = 0
    read_since: int = 0  # claims that read only the messages stored since this replica's last
    behind: int = 0  # turns whose first call was not the first step their claim made
    running: dict[str, str] = field(default_factory=dict)  # session -> turn


class _Serving:
    """A turn this replica runs: its lease, the agent's current view of it, the stop."""

    __slots__ = ("cell", "fenced", "gone", "stop", "turn")

    def __init__(self, cell: LeaseCell) -> None:
        self.cell = cell
        self.gone = asyncio.Event()  # set once its task no longer runs it
        self.stop = False
        self.turn: Turn
        self.fenced: FencedStore | None = None  # the turn's view of the store, once made

    def stop_turn(self) -> None:
        self.stop = True
        self.turn.request_stop()


@dataclass(frozen=True)
class Settings:
    """How a replica holds leases and looks for work (see ``Service``)."""

    replica: str
    lease: float
    renew_every: float
    poll: float
    concurrency: int
    error_detail: bool = False  # record a failed turn's own error text (see _failure.py)
    stop_poll: float = 0.2  # how often a store without notifications is asked for stops
    held: int = 100_000  # messages of served sessions kept so a claim reads only what is new


class Replica:
    """Serves turns from ``store`` with ``agent``, until :meth:`run`'s task is cancelled."""

    def __init__(
        self,
        store: Store,
        service: ServiceStore,
        agent: Agent,
        settings: Settings,
        live: LiveSink | None = None,
        *,
        wake: Callable[[str], object] | None = None,
        observers: Sequence[Observer] = (),
        held: Held | None = None,
    ) -> None:
        self.store = store
        self.observers = Observers([LogObserver(), *observers])
        self.service = service
        self.agent = agent
        self.settings = settings
        self.live = live
        self.woke = wake  # told of each session this replica wrote events to
        self.counters = Counters()
        self._wake = asyncio.Event()
        self._hinted: list[tuple[str, float]] = []  # (session, when the hint came)
        self._tried: dict[str, float] = {}  # session: when this replica last claimed it
        self._turns: dict[str, _Serving] = {}
        self._urgent: set[str] = set()  # sessions whose lease to renew now (a stop hint)
        self._renew_soon = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._held = Held(settings.held) if held is None else held
        inner = getattr(service, "__wrapped__", service)  # a wrapper's (metrics) store
        self._knows = settings.held > 0 and _takes(inner.claim, "known")
        self._ends_with_last = _takes(inner.end_turn, "last")
        # the claim makes a new turn's first step where the agent's first save is that step
        self._firsts = bool(getattr(agent, "saves_prompt_first", False)) and _takes(
            inner.claim, "first"
        )

    # -- looking for work -------------------------------------------------------------------

    async def run(self) -> None:
        """Claim and serve until cancelled; then the turns under way are abandoned."""
        if isinstance(self.service, Notifying):
            listener = asyncio.create_task(self._listen(self.service))
        else:
            listener = asyncio.create_task(self._watch_stops())
        renewer = asyncio.create_task(self._renew_forever())
        try:
            await self._claim_forever()
        finally:
            listener.cancel()
            renewer.cancel()
            await asyncio.gather(listener, renewer, return_exceptions=True)
            await self._abandon()

    async def _abandon(self) -> None:
        # Another replica carries the turns on from their last saved step. Nothing more is
        # written first: a cancelled run would otherwise save its calls under way as
        # "cancelled", and the next holder must redo them instead.
        cells = [serving.cell for serving in self._turns.values()]
        for cell in cells:
            cell.fenced = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if cells:
            await self._release(cells)

    async def _release(self, cells: list[LeaseCell]) -> None:
        """Let leases go now rather than at their expiry: the abandoned turns', or a claim's
        whose turn could not be started.

        Safe because this replica writes nothing more under them (every run has ended, and
        each cell is fenced, or the turn never began here), and a claimer takes the lease
        with epoch + 1, which refuses any write of ours still on its way. A release that
        fails (the store is away, or the turn ended meanwhile) leaves the lease to expire,
        as a crash would.
        """

        async def release(batch: list[LeaseCell]) -> None:
            leases = [cell.lease for cell in batch]
            try:  # a lease found stale is left as it is
                await asyncio.wait_for(self.service.renew_many(leases, seconds=0), _RELEASE)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the store is away: they expire instead
                log.info("%d leases are left to expire (%s)", len(batch), exc)

        await asyncio.gather(*(release(batch) for batch in _batches(cells)))

    async def _listen(self, service: Notifying) -> None:
        while True:
            try:
                async with service.hints() as hints:
                    async for hint in hints:
                        if hint.kind == "work":
                            self._hinted.append((hint.session, time.monotonic()))
                            self._wake.set()
                        elif hint.session in self._turns:
                            self._urgent.add(hint.session)  # learn the stop now
                            self._renew_soon.set()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the listener's connection went away: poll meanwhile
                log.warning("hints stopped (%s); polling until they are back", exc)
                await asyncio.sleep(self.settings.poll)

    async def _watch_stops(self) -> None:
        """Where no hint tells of a stop: ask the store, while turns run here, which of them
        were asked to stop (one cheap read for all of them), so a stop takes effect within
        ``stop_poll`` rather than at the next renewal."""
        settings = self.settings
        while True:
            await asyncio.sleep(settings.stop_poll)
            if not self._turns:
                continue
            try:
                sessions = await self.service.stopping(settings.replica)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the renewal still carries the stop
                log.debug("the stop poll failed: %s", exc)
                continue
            for session in sessions:
                serving = self._turns.get(session)
                if serving is not None and not serving.stop:
                    serving.stop_turn()

    async def _claim_forever(self) -> None:
        settings = self.settings
        while True:
            if len(self._tasks) >= settings.concurrency:
                await self._wait(settings.poll)
                continue
            target = self._target()
            if target is not None and target in self._turns:
                if not self._hinted:
                    await self._wait(settings.poll)
                continue
            said: dict[str, Any] = {"known": self._held.known(target)} if self._knows else {}
            if self._firsts:
                said["first"] = True
            if target is not None:
                self._tried[target] = time.monotonic()
            try:
                claim = await self.service.claim(
                    settings.replica,
                    seconds=settings.lease,
                    cap=self.agent.steers_per_turn,
                    session=target,
                    **said,
                )
                if claim is not None:
                    claim = await self._whole_or_release(claim)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a store error, or a bug: never stop claiming for it
                self.counters.store_errors += 1
                log.warning("claim failed: %s", exc, exc_info=not isinstance(exc, StoreError))
                await asyncio.sleep(settings.poll)
                continue
            if claim is not None:
                self._tried[claim.lease.session] = time.monotonic()
                self._written(claim.lease.session)
                self._start(claim)
                if target is None:
                    continue  # there may be more work waiting: claim again at once
            if not self._hinted:  # nothing found, or a hinted session claimed: wait for more
                await self._wait(settings.poll)

    def _target(self) -> str | None:
        """The next session a hint named, skipping hints this replica's own claim of the
        session answered already (one that began after the hint came read what it told of);
        None when no hint waits."""
        while self._hinted:
            session, came = self._hinted.pop(0)
            if self._tried.get(session, -math.inf) < came:
                return session
        if len(self._tried) > _TRIED:
            self._tried.clear()  # only an optimisation: forgetting costs a claim at most
        return None

    async def _whole_or_release(self, claim: Claim) -> Claim:
        """:meth:`_whole`; if the transcript cannot be read, the claim's lease is let go (so
        the turn is claimed again at once, here or elsewhere) and the error raised."""
        try:
            return await self._whole(claim)
        except asyncio.CancelledError:
            raise
        except Exception:
            await self._release([LeaseCell(claim.lease)])
            raise

    async def _whole(self, claim: Claim) -> Claim:
        """The claim with the session's whole transcript, from what this replica held."""
        self.counters.read_since += claim.known > 0
        whole = self._held.whole(claim)
        if whole is None:  # it left out messages not held here: read them
            messages = await self.store.messages(claim.lease.session)
            whole = dataclasses.replace(claim, messages=messages, known=0)
        return whole

    def _written(self, session: str) -> None:
        """Tell the ``wake`` callback (it logs its own failures) of a write to ``session``."""
        if self.woke is not None:
            self.woke(session)

    async def _wait(self, seconds: float) -> None:
        await waited(self._wake, seconds)
        self._wake.clear()

    # -- serving a turn ---------------------------------------------------------------------

    def _start(self, claim: Claim) -> None:
        self.counters.claims += 1
        self.counters.resumed += claim.resumed
        self.observers.call("claimed", claim)
        previous = self._turns.get(claim.lease.session)
        if previous is not None:
            # Our own lease ran out (the store was away longer than it) and this claim took
            # the session over: the old run is fenced now; the new one starts once it is gone.
            previous.cell.fenced = True
            previous.stop_turn()
        task = asyncio.create_task(self._serve(claim, previous))
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        full = len(self._tasks) >= self.settings.concurrency
        self._tasks.discard(task)
        if full:
            self._wake.set()  # room for another claim: the claims waited for it
        if not task.cancelled() and task.exception() is not None:
            log.error("a turn's task failed", exc_info=task.exception())

    async def _serve(self, claim: Claim, previous: _Serving | None = None) -> None:
        if previous is not None:
            await previous.gone.wait()
        lease = claim.lease
        with telemetry.turn_span(
            _agent_name(self.agent),
            lease.session,
            parent=claim.prompt.trace,
            attributes={
                "steerable.turn.id": claim.turn,
                "steerable.replica": lease.holder,
                "steerable.epoch": lease.epoch,
                "steerable.turn.resumed": claim.resumed,
            },
        ) as span:
            if span is not None and claim.resumed:
                span.add_event("steerable.takeover", _takeover(claim))
            await self._serve_turn(claim, span)

    async def _serve_turn(self, claim: Claim, span: Any) -> None:
        began = time.monotonic()
        session = claim.lease.session
        serving = _Serving(LeaseCell(claim.lease))
        serving.turn = self._turn(claim, claim.messages, claim.steers_taken, serving, first=True)
        self._turns[session] = serving
        self.counters.running[session] = claim.turn
        try:
            outcome = _already_over(claim)
            if outcome is not None:
                self.counters.recorded_on_takeover += 1
            else:
                outcome = await self._carry(claim, serving)
        finally:
            if self._turns.get(session) is serving:
                del self._turns[session]
                del self.counters.running[session]
            serving.gone.set()
        view = serving.fenced
        stored = None if view is None else view.stored  # a prefix of the stored transcript
        pending = None if view is None else view.take_pending()
        if serving.cell.fenced:
            self._hold(session, claim.mark, stored)
            self.counters.fenced += 1
            self.observers.call("fenced", session)
            if span is not None:
                span.set_attribute("steerable.turn.state", "fenced")
            log.info("session %r: the lease was lost; the new holder goes on", session)
            return
        detail = self.settings.error_detail
        recorded = reported(session, claim.turn, outcome, detail=detail)
        cell = serving.cell
        report = TurnReport(
            session,
            claim.turn,
            cell.lease.holder,
            cell.lease.epoch,
            recorded.state,
            claim.steps + cell.steps,
            claim.steers_taken + cell.taken,
            dict(recorded.usage),
            time.monotonic() - began,
            claim.resumed,
            recorded.error,
            getattr(outcome, "exception", None),
        )
        if recorded.state == "completed" and not recorded.text:
            log.warning(
                "turn %r of session %r completed with an empty answer: the model replied"
                " with no text (recorded as it is)",
                claim.turn,
                session,
            )
        last, report = await self._end(serving.cell, recorded, report, pending)
        if span is not None:
            _ended(span, report)
        if last and pending is not None and stored is not None and pending.at == len(stored):
            stored = [*stored, *last]  # stored with the end
        self._hold(session, claim.mark, stored)

    def _hold(self, session: str, mark: str, stored: list[Message] | None) -> None:
        """Keep what the turn knew of the stored transcript, for the session's next claim."""
        if stored is not None:
            self._held.keep(session, mark, stored)

    async def _carry(self, claim: Claim, serving: _Serving) -> Outcome:
        """Run the turn; while the store failed under it (and the lease holds), run it again
        from what is stored, the way another replica would carry it on."""
        cell = serving.cell
        while True:
            outcome = await self._run(serving.turn)
            if not cell.store_failed or cell.fenced or serving.stop:
                return outcome
            if cell.behind:
                cell.behind = False
                self.counters.behind += 1
            else:
                self.counters.store_errors += 1
            reloaded = await self._reload(claim, serving)
            if reloaded is None:
                return outcome
            answered = _answer(claim, reloaded.messages)
            if answered is not None:  # the answer's save committed; only its reply was lost
                return answered
            serving.turn = reloaded

    async def _reload(self, claim: Claim, serving: _Serving) -> Turn | None:
        """The turn again, from the stored transcript, once the store answers (None if the
        lease was lost or a stop came meanwhile)."""
        session, pause = claim.lease.session, 0.05
        while not serving.cell.fenced and not serving.stop:
            try:
                messages = await self.store.messages(session)
                view = await self.service.turn(session, claim.turn)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("session %r: waiting for the store to carry on (%s)", session, exc)
                await asyncio.sleep(pause)
                pause = min(pause * 2, self.settings.renew_every)
                continue
            serving.cell.store_failed = False
            taken = view.steers_taken if view is not None else claim.steers_taken
            return self._turn(claim, messages, taken, serving)
        return None

    def _turn(
        self,
        claim: Claim,
        stored: list[Message],
        taken: int,
        serving: _Serving,
        *,
        first: bool = False,
    ) -> Turn:
        """The turn as its agent runs it over ``stored`` with ``taken`` steers taken; the
        ``first`` time, a first step the claim made is the agent's to make, as it sees it
        (its first save is answered from the claim)."""
        ahead = None
        prompt = claim.prompt.message(steered=False)
        before = claim.steers_taken - len(claim.taken or ())  # taken before the claim's step
        if first and claim.taken is not None:
            ahead, taken = First(claim.start, prompt, claim.taken), before
        messages = list(stored)
        if claim.prompt.id not in {m.id for m in messages[claim.start :]}:
            messages.append(prompt)
        fenced = FencedStore(
            self.store,
            self.service,
            serving.cell,
            list(stored),
            written=self._written,
            observers=self.observers,
            turn=claim.turn,
            defer_last=self._ends_with_last,
            ahead=ahead,
        )
        serving.fenced = fenced
        live = self.live
        session, turn_id = claim.lease.session, claim.turn
        sink = None if live is None else _watching(live, session, turn_id)
        turn = Turn(
            session=session,
            id=turn_id,
            prompt=claim.prompt,
            messages=messages,
            store_session=Session(session, fenced),
            resumed=claim.resumed or taken != before or stored != claim.messages,
            steers_left=max(0, min(claim.cap, self.agent.steers_per_turn) - taken),
            events=sink,
        )
        if serving.stop:
            turn.request_stop()
        return turn

    async def _run(self, turn: Turn) -> Outcome:
        try:
            return await self.agent.run_turn(turn)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # logged with its traceback where the turn's end is
            return failure(exc)

    async def _renew_forever(self) -> None:
        """Renew every lease held here each ``renew_every``, and a stop hint's at once."""
        every = self.settings.renew_every
        due = time.monotonic() + every
        while True:
            await waited(self._renew_soon, max(0.0, due - time.monotonic()))
            self._renew_soon.clear()
            if time.monotonic() >= due:
                self._urgent.clear()
                await self._renew(list(self._turns.values()))
                due = time.monotonic() + every
            else:
                urgent, self._urgent = self._urgent, set()
                await self._renew([self._turns[s] for s in urgent if s in self._turns])

    async def _renew(self, servings: list[_Serving]) -> None:
        """Renew the leases of ``servings``, :data:`RENEW_BATCH` a call; a call that fails is
        tried again at the next interval (the next write will tell if a lease was lost)."""
        live = [serving for serving in servings if not serving.cell.fenced]
        for batch in _batches(live):
            leases = [serving.cell.lease for serving in batch]
            try:
                renewals = await self.service.renew_many(leases, seconds=self.settings.lease)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.counters.store_errors += 1
                log.warning("the renewal of %d leases failed: %s", len(batch), exc)
                continue
            for serving, renewal in zip(batch, renewals, strict=True):
                self._renewed(serving, renewal)

    def _renewed(self, serving: _Serving, renewal: Renewal | None) -> None:
        """Apply one lease's renewal: the new expiry and a stop, or, stale, its turn fenced."""
        if self._turns.get(serving.cell.lease.session) is not serving:
            return  # its turn ended while the call was under way: nothing left to apply
        if renewal is None:  # another replica holds the session now
            serving.cell.fenced = True
            serving.stop_turn()
            return
        serving.cell.lease = renewal.lease
        if renewal.stop_requested:
            serving.stop_turn()

    async def _end(
        self, cell: LeaseCell, outcome: Outcome, report: TurnReport, pending: Pending | None
    ) -> tuple[list[Message], TurnReport]:
        """Record the turn's end, with its last save where one was kept for it; the messages
        of that save the end stored ([]: none, or the end was not recorded), and the report
        of the end as recorded (failed, where the last save was refused)."""
        deadline = time.monotonic() + self.settings.lease
        last: dict[str, Any] = {}
        if pending is not None:
            last = {"last": pending.messages, "at": pending.at}
        while True:
            try:
                following = await self.service.end_turn(cell.lease, outcome, **last)
            except Fenced:
                self.counters.fenced += 1
                self.observers.call("fenced", cell.lease.session)
                return [], report
            except (TranscriptConflict, InvalidMessage) as exc:
                if not last:
                    raise
                # the stored transcript is not what the turn saw: its answer is not stored,
                # and the turn ends failed (as a refused save of its answer failed it before)
                self.counters.store_errors += 1
                session = cell.lease.session
                outcome = reported(session, report.turn, failure(exc), detail=False)
                report = dataclasses.replace(report, state=outcome.state, error=outcome.error)
                last = {}
                continue
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # StoreUnavailable, or worse: try until the lease is gone
                self.counters.store_errors += 1
                if time.monotonic() > deadline:
                    log.warning("the end of a turn was not recorded (%s): left to the next", exc)
                    return [], report
                await asyncio.sleep(min(self.settings.poll, 0.2))
                continue
            self.counters.ended += 1
            self.observers.call("turn_ended", report)
            self._written(cell.lease.session)
            if following is not None:
                self._hinted.append((cell.lease.session, time.monotonic()))
                self._wake.set()
            return list(last.get("last", [])), report


def _agent_name(agent: Agent) -> str:
    """The agent's ``name`` if it has one (a framework's agent does), else its class's."""
    name = getattr(agent, "name", None)
    return name if isinstance(name, str) and name else type(agent).__name__


def _takeover(claim: Claim) -> dict[str, Any]:
    """The takeover event's attributes: the old holder and epoch, and the new ones."""
    lease = claim.lease
    values: dict[str, Any] = {
        "steerable.holder": lease.holder,
        "steerable.epoch": lease.epoch,
        "steerable.previous_epoch": lease.epoch - 1,  # every claim grows it by one
        "steerable.steps": claim.steps,
    }
    previous = claim.previous_holder
    if previous:
        values["steerable.previous_holder"] = previous
    return values


def _ended(span: Any, report: TurnReport) -> None:
    """The turn's end on its span."""
    span.set_attribute("steerable.turn.state", report.state)
    span.set_attribute("steerable.turn.steps", report.steps)
    span.set_attribute("steerable.turn.steers", report.steers)
    span.set_attributes(telemetry.usage_attributes(report.usage))
    if report.state == "failed":
        telemetry.failed(span, report.exception or report.error)


def _watching(live: LiveSink, session: str, turn: str) -> EventSink:
    """The turn's event sink over ``live``: a sink that fails is logged once and the turn
    goes on (what watchers see is live only; the turn is what is durable). No watcher, no
    sink: an agent streams its model's text only for one."""
    failed = False

    def sink(event: Event) -> None:
        nonlocal failed
        try:
            live(session, turn, event)
        except Exception:
            if not failed:
                failed = True
                log.exception("session %r: the live sink failed on turn %r", session, turn)

    return sink


def _already_over(claim: Claim) -> Outcome | None:
    """The outcome of a resumed turn that needs no run: answered already, or stopped.

    An answer saved before the stop came wins: the turn ended naturally, it was only its
    end that was not recorded.
    """
    if not claim.resumed:
        return None
    answered = _answer(claim, claim.messages)
    if answered is not None:
        return answered
    return Outcome("stopped") if claim.stop_requested else None


def _answer(claim: Claim, messages: list[Message]) -> Outcome | None:
    """``completed`` with the answer, if the stored turn ends with its final answer."""
    mine = messages[claim.start :]
    answered = bool(mine) and mine[-1].role == "assistant" and not mine[-1].tool_calls
    if answered and any(m.id == claim.prompt.id for m in mine):
        return Outcome("completed", mine[-1].readable)
    return None


async def waited(event: asyncio.Event, seconds: float) -> None:
    """Until ``event`` is set or ``seconds`` have passed.

    Not ``asyncio.wait_for``: on Python 3.11 it returns, rather than raising, when the task
    is cancelled as the event is set, so a loop around it would never see its cancellation
    (a service's replica then ran on past its ``serving()`` and the exit waited forever);
    ``asyncio.timeout`` tells its own cancellation from another's.
    """
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await event.wait()


def _batches(items: list[_I]) -> list[list[_I]]:
    """``items`` in calls of at most :data:`RENEW_BATCH`."""
    return [items[at : at + RENEW_BATCH] for at in range(0, len(items), RENEW_BATCH)]


def _takes(verb: Callable[..., object], keyword: str) -> bool:
    """Whether a store's ``verb`` names ``keyword`` (a store written before it does not; one
    that takes ``**kwargs`` might drop it, so it is not asked to)."""
    try:
        parameters = inspect.signature(verb).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == keyword for p in parameters)
