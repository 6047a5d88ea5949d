"""What a failed turn tells its tenant, and what it tells the server's log.

An agent's exception text is the operator's business, not the tenant's: a provider's error
names the URL it called and can quote a key, a database driver's names its host. So the
replica records a failed turn's ``error`` as a stable code and a safe sentence
(:data:`AGENT_ERROR`), and logs the agent's own text with the tenant, session, turn and
traceback. What is recorded is what every view shows (the HTTP turn view, the events, the
client), so no view can leak it. ``Service(error_detail=True)`` (``steerable serve
--error-detail``) records the text as it was, for development.

:class:`Failure` is a failed :class:`~steerable.service_store.Outcome` that also carries
the exception, so the log gets the traceback; it is never stored.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from steerable.service_store import Outcome

__all__ = ["AGENT_ERROR", "Failure", "failure", "reported"]

log = logging.getLogger("steerable.service")

AGENT_ERROR = "the agent failed (code agent_error); see the server's log"
"""A failed turn's recorded ``error`` unless the service passes the agent's text through."""


@dataclass(frozen=True, slots=True)
class Failure(Outcome):
    """A ``failed`` outcome with the exception that failed it (for the log, never stored)."""

    exception: BaseException | None = field(default=None, compare=False, repr=False)


def failure(exc: BaseException) -> Failure:
    """The outcome of a turn that ``exc`` failed, its text as the agent would say it."""
    return Failure("failed", error=f"{type(exc).__name__}: {exc}", exception=exc)


def reported(session: str, turn: str, outcome: Outcome, *, detail: bool) -> Outcome:
    """``outcome`` as it is recorded: a failure logged, and its text replaced unless ``detail``.

    Under the HTTP API a stored session id is ``tenant/session``: the log names the tenant.
    """
    if outcome.state != "failed":
        return Outcome(outcome.state, outcome.text, outcome.error, outcome.usage)
    exception = outcome.exception if isinstance(outcome, Failure) else None
    tenant, slash, _ = session.partition("/")
    log.error(
        "turn %r of session %r%s failed: %s",
        turn,
        session,
        f" (tenant {tenant!r})" if slash else "",
        outcome.error or "(the agent gave no reason)",
        exc_info=(type(exception), exception, exception.__traceback__) if exception else None,
        extra={"tenant": tenant if slash else None, "session": session, "turn": turn},
    )
    if detail:
        return Outcome("failed", outcome.text, outcome.error, outcome.usage)
    return Outcome("failed", outcome.text, AGENT_ERROR, outcome.usage)
