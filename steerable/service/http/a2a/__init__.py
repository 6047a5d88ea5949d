"""A2A (the Agent2Agent protocol) over the service, on the official ``a2a-sdk``.

A context is a session (the tenant's session id), a task is a turn (its id names the turn,
which is its prompt's input id, and its context), the task's history is the turn's
messages and its artifact the turn's answer. A message with no ``taskId`` is a send (a new
task); with the ``taskId`` of a ``working`` task it is a steer, taken at the turn's next
step, exactly once (or a task of its own if the turn ends first); for a task that is over
it is refused with the SDK's ``UnsupportedOperationError``. ``CancelTask`` stops the turn;
``SubscribeToTask`` follows it again, from any replica. docs/protocols/a2a.md has the table.

Routes: the JSON-RPC endpoint ``POST /v1/a2a`` (behind the bearer gate; A2A 1.0's method
names, and 0.3's ``message/send`` ... ``tasks/resubscribe`` too) and the public agent card
at ``/.well-known/agent-card.json``.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import create_jsonrpc_routes
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
)
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import JSONResponse

from steerable.service.http._context import Context
from steerable.service.http.a2a._handler import RequestKeeper, TurnHandler

__all__ = ["PATH", "agent_card", "mount"]

PATH = "/v1/a2a"
"""Where the JSON-RPC endpoint is."""


def _version() -> str:
    try:
        return version("steerable")
    except PackageNotFoundError:
        return "0"


def agent_card(base_url: str) -> AgentCard:
    """The agent card of a service answering at ``base_url``."""
    card = AgentCard(
        name="steerable",
        description=(
            "A steerable agent service: a message to a working task is a steer, taken at"
            " the turn's next step"
        ),
        version=_version(),
        supported_interfaces=[
            AgentInterface(
                url=base_url.rstrip("/") + PATH, protocol_binding="JSONRPC", protocol_version="1.0"
            )
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(
                id="turn",
                name="turn",
                description="Answers a message; steered by messages to its working task",
                tags=["steerable"],
            )
        ],
    )
    card.security_schemes["bearer"].CopyFrom(
        SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="Bearer"))
    )
    requirement = SecurityRequirement()
    requirement.schemes["bearer"].SetInParent()
    card.security_requirements.append(requirement)
    return card


def mount(app: FastAPI, context: Context) -> None:
    """Add the A2A routes to ``app``: the JSON-RPC endpoint and the agent card."""
    handler = TurnHandler(context, agent_card("http://localhost"))

    async def card(request: Request) -> JSONResponse:
        # the card names the URL the client reached us by, so it works behind any host
        return JSONResponse(agent_card_to_dict(agent_card(str(request.base_url))))

    app.add_route(AGENT_CARD_WELL_KNOWN_PATH, card, methods=["GET"], include_in_schema=False)
    app.router.routes.extend(
        create_jsonrpc_routes(
            handler, PATH, context_builder=RequestKeeper(), enable_v0_3_compat=True
        )
    )
