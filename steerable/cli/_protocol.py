"""uvicorn's HTTP/1.1 protocol with a bound on a request's head: a connection that opens
and sends no complete request head (a slow-loris client, an idle socket) is closed after
``head_timeout`` seconds.

uvicorn closes a keep-alive connection idle after a response (``timeout_keep_alive``) and
bounds nothing else: a connection that never finishes its first request's headers is held
until the client goes. The timer here runs whenever no request is under way on the
connection, from its opening and from each response's end, and stops when a request's head
has arrived (its body then has its own bound: the app's ``body_timeout``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["guarded_h11"]


def guarded_h11(head_timeout: float) -> type[asyncio.Protocol]:
    """The protocol class for uvicorn's ``http=``, closing a head that takes too long."""

    class GuardedH11(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self._under_way():
                self._disarm()
            else:
                self._arm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _under_way(self) -> bool:
            cycle = self.cycle
            return cycle is not None and not cycle.response_complete

        def _arm(self) -> None:
            if self._head_timer is None and not self.transport.is_closing():
                self._head_timer = self.loop.call_later(head_timeout, self._expired)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _expired(self) -> None:
            self._head_timer = None
            if not self._under_way():
                self.transport.close()

    return GuardedH11
