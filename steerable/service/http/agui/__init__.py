"""AG-UI for steerable: a run streams a turn's AG-UI events; a run for a thread whose turn
is going on steers it (docs/protocols/ag-ui.md).

Built on ``ag-ui-protocol`` (``pip install 'steerable[ag-ui]'``): its ``RunAgentInput``,
its events and its ``EventEncoder``. :func:`mount` adds the routes to an app of
:func:`steerable.service.http.create_app` (``protocols=["ag-ui"]``,
``steerable serve --protocol ag-ui``).
"""

from steerable._extras import missing_extra

try:
    import ag_ui.core  # noqa: F401
except ImportError as exc:  # pragma: no cover - the frame names the extra
    raise missing_extra("steerable.service.http.agui", "ag-ui", "ag_ui", exc) from None

from steerable.service.http.agui._routes import mount

__all__ = ["mount"]
