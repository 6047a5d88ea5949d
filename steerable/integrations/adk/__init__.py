"""Google ADK on steerable: ADK's loop, a steerable session, steers taken at ADK's own step.

- :class:`SteerableSessionService`: ADK's ``BaseSessionService`` over a steerable store;
  events kept verbatim, in append order.
- :class:`SteeringPlugin`: takes the session's steers before each model call of a run whose
  root is an ``LlmAgent``, puts them after the tool results and keeps them there.
- :class:`ADKAgent`: an ADK agent as an agent of :mod:`steerable.service`.
- :func:`journaled`: an ADK tool function whose each call runs once, across crashes and
  replicas (the tool journal, :mod:`steerable.journal`, under ADK's own call id).
- :class:`StaleSession`, :class:`SessionNotFound`, :class:`NoUserState`: the service's errors,
  each steerable's and ADK's own at once (see :mod:`._errors`).

``docs/integrations.md`` says where ADK has no step to take a steer at.
"""

from __future__ import annotations

from steerable._extras import missing_extra

try:
    import google.adk  # noqa: F401
except ImportError as exc:
    raise missing_extra("steerable.integrations.adk", "adk", "google-adk", exc) from None

from steerable.integrations.adk._agent import ADKAgent
from steerable.integrations.adk._errors import NoUserState, SessionNotFound, StaleSession
from steerable.integrations.adk._journaled import journaled
from steerable.integrations.adk._plugin import SteeringPlugin
from steerable.integrations.adk._sessions import SteerableSessionService

__all__ = [
    "ADKAgent",
    "NoUserState",
    "SessionNotFound",
    "StaleSession",
    "SteerableSessionService",
    "SteeringPlugin",
    "journaled",
]
