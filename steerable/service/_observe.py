"""What a replica tells the operator's instruments as it serves turns.

A replica calls each :class:`Observer` it was given (``Service(observers=[...])``) at a
claim, at a step that took steers, at a lost lease and at a turn's end. Metrics
(:mod:`steerable.service.http._metrics`) and the turn's log line (:class:`LogObserver`)
hear the same calls; the turn's span is the replica's own (:mod:`steerable.telemetry`).
An observer is called on the replica's event loop and must not block or raise: one that
raises is logged once and not called again for that kind of call.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from steerable.service_store import Claim, EndState

__all__ = ["LogObserver", "Observer", "TurnReport", "tenant_of"]

log = logging.getLogger("steerable.service")


def tenant_of(session: str) -> str | None:
    """The tenant of a stored session id (``tenant/sid`` under the HTTP API), else None."""
    tenant, slash, _ = session.partition("/")
    return tenant if slash else None


@dataclass(frozen=True, slots=True)
class TurnReport:
    """A turn's end as its holder saw it.

    ``steps`` and ``steers`` count the whole turn (an earlier holder's too, on a takeover);
    ``seconds`` is this holder's time on it, from its claim to its end's record; ``error``
    the failure as it was recorded (the safe text unless ``error_detail``), and
    ``exception`` what raised it, never stored.
    """

    session: str
    turn: str
    holder: str
    epoch: int
    state: EndState
    steps: int
    steers: int
    usage: dict[str, int]
    seconds: float
    resumed: bool
    error: str | None = None
    exception: BaseException | None = field(default=None, compare=False, repr=False)

    @property
    def tenant(self) -> str | None:
        """The session's tenant, under the HTTP API."""
        return tenant_of(self.session)


@runtime_checkable
class Observer(Protocol):
    """Told what a replica does; see the module docstring."""

    def claimed(self, claim: Claim) -> None:
        """A turn was claimed by this replica (``claim.resumed``: taken over)."""
        ...

    def steers_taken(self, session: str, turn: str, waits: Sequence[float]) -> None:
        """A step of ``turn`` took steers; ``waits`` the seconds each waited since it arrived
        (the database clock's arrival against this replica's clock: a skew shows)."""
        ...

    def fenced(self, session: str) -> None:
        """A write of this replica was refused: another holds the session now."""
        ...

    def turn_ended(self, report: TurnReport) -> None:
        """A turn's end was recorded by this replica."""
        ...


class LogObserver:
    """One INFO line per turn's end on ``steerable.service``, its fields as ``extra``, for
    a JSON formatter to put each in its own key (``steerable serve --log-format json``)."""

    def claimed(self, claim: Claim) -> None:
        if claim.resumed:
            log.info(
                "turn %r of session %r taken over at epoch %d",
                claim.turn,
                claim.lease.session,
                claim.lease.epoch,
                extra=_fields(
                    claim.lease.session,
                    turn=claim.turn,
                    holder=claim.lease.holder,
                    epoch=claim.lease.epoch,
                    event="takeover",
                ),
            )

    def steers_taken(self, session: str, turn: str, waits: Sequence[float]) -> None:
        pass

    def fenced(self, session: str) -> None:
        pass

    def turn_ended(self, report: TurnReport) -> None:
        log.info(
            "turn %r of session %r ended %s after %d steps, %d steers, %.3f s",
            report.turn,
            report.session,
            report.state,
            report.steps,
            report.steers,
            report.seconds,
            extra=_fields(
                report.session,
                turn=report.turn,
                holder=report.holder,
                epoch=report.epoch,
                state=report.state,
                steps=report.steps,
                steers=report.steers,
                usage=report.usage,
                seconds=round(report.seconds, 6),
                resumed=report.resumed,
                error=report.error,
                event="turn_ended",
            ),
        )


def _fields(session: str, **values: Any) -> dict[str, Any]:
    return {"tenant": tenant_of(session), "session": session, **values}


class Observers:
    """The observers of one replica, called in turn; a failing one is logged once."""

    __slots__ = ("_all", "_failed")

    def __init__(self, observers: Sequence[Observer]) -> None:
        self._all = tuple(observers)
        self._failed: set[tuple[int, str]] = set()

    def __bool__(self) -> bool:
        return bool(self._all)

    def call(self, name: str, *args: Any) -> None:
        for index, observer in enumerate(self._all):
            if (index, name) in self._failed:
                continue
            try:
                getattr(observer, name)(*args)
            except Exception:
                self._failed.add((index, name))
                log.exception("observer %r failed in %s; not called for it again", observer, name)
