"""The MCP resources: the tenant's sessions, and each session's transcript.

``steerable://sessions`` lists the tenant's sessions (JSON, the HTTP API's
``SessionsPage``); ``steerable://sessions/{sid}/transcript`` (a resource template; the id
percent-encoded) is a session's transcript (JSON, a ``TranscriptPage`` of its first
messages, up to :data:`~steerable.service._service.MAX_PAGE`). A client that subscribes to a
transcript is told ``notifications/resources/updated`` each time the session's durable
events move (a turn starts, a message is written, the turn ends): :class:`Followers`
follows the session as the app's event stream does, with its own helper
(:func:`steerable.service.http._sse.stream`).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import AsyncGenerator, Awaitable, Callable
from urllib.parse import quote, unquote

from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    ListResourcesResult,
    ListResourceTemplatesResult,
    ReadResourceResult,
    Resource,
    ResourceTemplate,
    TextResourceContents,
)
from starlette.requests import Request

from steerable.service._service import MAX_PAGE
from steerable.service.http import _models as m
from steerable.service.http._context import Context
from steerable.service.http._problems import ProblemError, tenant_of
from steerable.service.http._sse import last_event, stream

__all__ = ["SESSIONS", "TEMPLATE", "Followers", "list_resources", "read_resource", "session_of"]

log = logging.getLogger("steerable.service.http.mcp")

SESSIONS = "steerable://sessions"
"""The resource that lists the tenant's sessions."""
TEMPLATE = "steerable://sessions/{sid}/transcript"
"""The template of a session's transcript."""
_PREFIX, _SUFFIX = "steerable://sessions/", "/transcript"
_JSON = "application/json"


def transcript_uri(sid: str) -> str:
    """The transcript resource of the tenant's session ``sid``."""
    return f"{_PREFIX}{quote(sid, safe='')}{_SUFFIX}"


def session_of(uri: str) -> str:
    """The tenant's session id a transcript ``uri`` names; an MCP error when it names none."""
    if uri.startswith(_PREFIX) and uri.endswith(_SUFFIX):
        sid = unquote(uri[len(_PREFIX) : -len(_SUFFIX)])
        if sid and "/" not in uri[len(_PREFIX) : -len(_SUFFIX)]:
            return sid
    raise MCPError(INVALID_PARAMS, f"no resource {uri!r} (there are {SESSIONS} and {TEMPLATE})")


async def _sessions(context: Context, request: Request) -> m.SessionsPage:
    prefix = tenant_of(request) + "/"
    page = await context.service.store.sessions(prefix=prefix, after=None, limit=100, state=None)
    out = [m.session_out(s, prefix) for s in page]
    return m.SessionsPage(sessions=out, next=out[-1].session if len(out) == 100 else None)


async def list_resources(context: Context, request: Request) -> ListResourcesResult:
    """The sessions list, and the transcript of each of the tenant's first 100 sessions."""
    page = await _sessions(context, request)
    listed = [Resource(uri=SESSIONS, name="sessions", mime_type=_JSON)]
    for s in page.sessions:
        uri = transcript_uri(s.session)
        listed.append(Resource(uri=uri, name=f"{s.session} transcript", mime_type=_JSON))
    return ListResourcesResult(resources=listed)


def templates() -> ListResourceTemplatesResult:
    """The transcript template."""
    template = ResourceTemplate(uri_template=TEMPLATE, name="transcript", mime_type=_JSON)
    return ListResourceTemplatesResult(resource_templates=[template])


async def read_resource(context: Context, request: Request, uri: str) -> ReadResourceResult:
    """The sessions list or a transcript, as JSON; an MCP error for an unknown session."""
    if uri == SESSIONS:
        text = (await _sessions(context, request)).model_dump_json()
    else:
        try:
            session = context.session(request, session_of(uri))
            entries = await context.service.transcript(session, limit=MAX_PAGE)
            if not entries:
                await context.known(session)
        except ProblemError as exc:
            raise MCPError(INVALID_PARAMS, f"{exc.code}: {exc.detail}") from None
        out = [m.message_out(e) for e in entries]
        more = len(entries) == MAX_PAGE
        page = m.TranscriptPage(messages=out, next=out[-1].position if more else None)
        text = page.model_dump_json()
    return ReadResourceResult(contents=[TextResourceContents(uri=uri, mime_type=_JSON, text=text)])


Notify = Callable[[str], Awaitable[None]]


class Followers:
    """The subscriptions of this process: one task per (connection, transcript) that tells
    the subscriber each time the session's events move, until it unsubscribes, its
    connection fails, or :meth:`close`. Each holds one of the tenant's event streams
    (``Limits.streams``), as the app's SSE route does."""

    def __init__(self, context: Context) -> None:
        self.context = context
        self._tasks: dict[tuple[str, str], asyncio.Task[None]] = {}

    async def subscribe(self, request: Request, connection: str, uri: str, notify: Notify) -> None:
        """Follow the transcript ``uri`` for ``connection`` (once: again is a no-op)."""
        key = (connection, uri)
        if key in self._tasks:
            return
        try:
            session = self.context.session(request, session_of(uri))
            after = await last_event(self.context.service, session)
            release = self.context.limits.hold_stream(tenant_of(request))
        except ProblemError as exc:
            raise MCPError(INVALID_PARAMS, f"{exc.code}: {exc.detail}") from None
        task = asyncio.create_task(self._follow(session, after, uri, notify))
        self._tasks[key] = task

        def ended(_: asyncio.Task[None]) -> None:
            release()
            if self._tasks.get(key) is task:
                del self._tasks[key]

        task.add_done_callback(ended)

    def unsubscribe(self, connection: str, uri: str) -> None:
        """Stop following ``uri`` for ``connection``."""
        task = self._tasks.pop((connection, uri), None)
        if task is not None:
            task.cancel()

    def drop(self, connection: str) -> None:
        """Stop following anything for ``connection`` (its MCP session ended)."""
        for key in [k for k in self._tasks if k[0] == connection]:
            self._tasks.pop(key).cancel()

    async def close(self) -> None:
        """Stop every follower."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _follow(self, session: str, after: int, uri: str, notify: Notify) -> None:
        context = self.context
        frames = stream(
            context.service, context.live, session, after, keepalive=math.inf, poll=context.poll
        )
        try:
            async for frame in frames:
                if frame.startswith("id: "):  # a durable event: the transcript may have moved
                    await notify(uri)
        except Exception:  # the connection is gone: nobody to tell
            log.info("stopped following %r for a subscriber", session, exc_info=True)
        finally:
            if isinstance(frames, AsyncGenerator):  # it is: closed now, not when collected
                await frames.aclose()
