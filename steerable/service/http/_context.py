"""What the routes of the HTTP API share: their parameters, the problems they document, the
unknown-query check, and the :class:`Context` (the service, the live feed, the bounds)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Header, Path, Request
from fastapi.dependencies.models import Dependant

from steerable.service import Service
from steerable.service._service import MAX_ID
from steerable.service.http import _bodies as b
from steerable.service.http._limits import TenantLimits
from steerable.service.http._live import LiveFeed
from steerable.service.http._problems import Problem, ProblemError, field_name, tenant_of
from steerable.service_store import Accepted, InputKind

__all__ = [
    "MAX_AFTER",
    "MAX_WAIT",
    "Context",
    "Id",
    "Key",
    "Sid",
    "known_query",
    "problems",
]

MAX_AFTER = 2**62 - 1
"""The largest ``after`` a route takes: the stores' positions and event ids stay below 2^62."""
MAX_WAIT = 60.0


def problems(bearer: bool, *statuses: int) -> dict[int | str, dict[str, Any]]:
    """The problems a route documents: 401 only when the app has tokens."""
    listed = (*((401,) if bearer else ()), 422, 503, *statuses)
    return {s: {"model": Problem, "description": "a problem"} for s in listed}


Sid = Annotated[
    str, Path(min_length=1, max_length=MAX_ID, pattern=b.NO_NUL, description="the session's id")
]
Id = Annotated[str, Path(min_length=1, max_length=MAX_ID, pattern=b.NO_NUL)]
Key = Annotated[
    str | None,
    Header(alias="Idempotency-Key", min_length=1, max_length=MAX_ID, description="the input id"),
]


def _query_names(dependant: Dependant) -> set[str]:
    names = {field.alias for field in dependant.query_params}
    for inner in dependant.dependencies:
        names |= _query_names(inner)
    return names


async def known_query(request: Request) -> None:
    """422 for a query parameter the route does not take: refused, as an unknown body field
    is, rather than dropped unread (a misspelt ``limt=5`` would silently be 100)."""
    dependant: Dependant | None = getattr(request.scope.get("route"), "dependant", None)
    known = set() if dependant is None else _query_names(dependant)
    for name in request.query_params:
        if name not in known:
            raise ProblemError(
                422,
                "invalid_request",
                f"query.{field_name(name)}: is not a parameter of this route"
                " (unknown parameters are refused)",
            )


@dataclass(frozen=True, slots=True)
class Context:
    """What the routes share: the service, the live feed, the stream's settings, the
    tenants' counters."""

    service: Service
    live: LiveFeed
    keepalive: float
    poll: float
    limits: TenantLimits

    def session(self, request: Request, sid: str) -> str:
        """The store's id of the tenant's session ``sid``; 422 when it cannot be one."""
        tenant = tenant_of(request)
        room = MAX_ID - len(tenant) - 1
        if len(sid) > room:
            raise ProblemError(
                422, "invalid_request", f"a session id has at most {room} characters here"
            )
        if "\x00" in sid:
            raise ProblemError(422, "invalid_request", "a session id has no NUL")
        return f"{tenant}/{sid}"

    async def exists(self, session: str) -> bool:
        """Whether the session had an input or a transcript."""
        service = self.service
        if await service.events(session, after=0, limit=1):
            return True
        return bool(await service.transcript(session, limit=1))

    async def known(self, session: str) -> None:
        """404 ``session_not_found`` unless the session exists."""
        if not await self.exists(session):
            raise ProblemError(404, "session_not_found", "no such session")

    async def accept(
        self, request: Request, sid: str, body: b.SendBody | b.SteerBody, key: str | None
    ) -> tuple[str, Accepted]:
        """Send or steer ``body``, idempotently: the same id with another body is 409."""
        session = self.session(request, sid)
        if body.id is not None and key is not None and body.id != key:
            # 409, not 422: each is valid alone, and together they name two inputs
            raise ProblemError(
                409, "idempotency_conflict", "the body's id and the Idempotency-Key differ"
            )
        self.limits.spend(tenant_of(request))
        id = body.id if body.id is not None else key
        kind: InputKind
        if isinstance(body, b.SendBody):
            kind = "send"
            accepted = await self.service.send(
                session, body.text, id=id, metadata=body.metadata, if_idle=body.if_idle
            )
        else:
            kind = "steer"
            accepted = await self.service.steer(
                session, body.text, id=id, metadata=body.metadata, expected_turn=body.expected_turn
            )
        if accepted.duplicate:
            first = await self.service.input(session, accepted.id)
            if accepted.kind != kind or (first is not None and first.text != body.text):
                raise ProblemError(
                    409, "idempotency_conflict", "this id was used with another body"
                )
        return session, accepted
