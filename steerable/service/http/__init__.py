"""The service over HTTP: a FastAPI app, ``create_app(service, ...)``, served by uvicorn.

Install it with ``pip install 'steerable[serve]'``. ``steerable serve`` runs it; an
application can also mount it in its own::

    from steerable.service import Service
    from steerable.service.http import create_app, live_feed

    live = live_feed(store)  # Postgres: live events from every replica; else from this one
    app = create_app(Service(store, agent, live=live.sink), tokens={"t0ken": "acme"}, live=live)

See ``docs/http.md`` for the routes, their fields and codes, tenants, idempotency and the
event stream.
"""

from steerable._extras import missing_extra

try:
    import fastapi  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised in a subprocess by tests
    raise missing_extra("steerable.service.http", "serve", "fastapi", exc) from None

from steerable.service.http._app import create_app, live_feed
from steerable.service.http._limits import Limits
from steerable.service.http._live import Delta, LiveFeed, LiveTool, LocalLive, Subscription
from steerable.service.http._problems import Problem

__all__ = [
    "Delta",
    "Limits",
    "LiveFeed",
    "LiveTool",
    "LocalLive",
    "Problem",
    "Subscription",
    "create_app",
    "live_feed",
]
