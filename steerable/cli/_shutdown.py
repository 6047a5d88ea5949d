"""How ``steerable serve`` ends on SIGTERM or Ctrl-C: within a bounded grace, streams closed.

uvicorn on its own waits for every open connection to finish its response, and an event
stream never finishes: a replica followed by one client would never exit. So:

1. As the shutdown begins, every event stream under way (a ``text/event-stream`` response)
   is ended cleanly, with the last chunk of its body: the client sees the stream end and
   reconnects with ``Last-Event-ID`` to another replica, missing nothing (durable events
   have the same ids everywhere).
2. Other requests (a turn view's ``?wait=``) get ``grace`` seconds to finish; then uvicorn
   cancels them.
3. The app's lifespan then stops the replica: the turns it runs are abandoned (nothing more
   is written for them) and their leases released, so another replica carries each on at
   once from its last saved step (see :class:`steerable.service.Service`).
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import uvicorn

__all__ = ["EndingStreams", "Server"]

Scope = dict[str, Any]
Message = dict[str, Any]


def _is_stream(message: Message) -> bool:
    for name, value in message.get("headers", ()):
        if bytes(name).lower() == b"content-type":
            return bytes(value).split(b";")[0].strip().lower() == b"text/event-stream"
    return False


class EndingStreams:
    """ASGI middleware: :meth:`end` ends every event stream under way, and any started after."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.ending = False
        self._streams: set[asyncio.Task[Any]] = set()
        self._ended: set[asyncio.Task[Any]] = set()

    def end(self) -> None:
        """End the event streams now (each one's request is cancelled, its body finished)."""
        self.ending = True
        for task in list(self._streams):
            self._cancel(task)

    def _cancel(self, task: asyncio.Task[Any]) -> None:
        if task not in self._ended:
            self._ended.add(task)
            task.cancel()

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        """Serve the request; a stream ended by :meth:`end` is finished here, not failed."""
        task = asyncio.current_task()
        if scope["type"] != "http" or task is None:
            await self.app(scope, receive, send)
            return

        async def watched(message: Message) -> None:
            if message["type"] == "http.response.start" and _is_stream(message):
                self._streams.add(task)
                if self.ending:  # it began after the shutdown did: it ends at once
                    self._cancel(task)
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except asyncio.CancelledError:
            if task not in self._ended:
                raise
            task.uncancel()  # our own cancel, taken: the body is finished instead
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            self._streams.discard(task)
            self._ended.discard(task)


class Server(uvicorn.Server):
    """uvicorn's server, which ends the event streams as its shutdown begins."""

    def __init__(self, config: uvicorn.Config, streams: EndingStreams) -> None:
        super().__init__(config)
        self.streams = streams

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """End the streams, then shut down as uvicorn does (``timeout_graceful_shutdown``)."""
        self.streams.end()
        await super().shutdown(sockets)
