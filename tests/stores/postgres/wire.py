"""A TCP relay between asyncpg and Postgres: it counts what the client sends and cuts lines.

Tests point a pool at the relay instead of the server. Every message the client sends is
read whole and counted by its protocol type before it goes on, so a test can count round
trips (a ``Sync`` or ``Flush`` ends one in the extended protocol, a ``Query`` in the
simple one). The
relay can also drop every connection (the server went away, for the client), stop
listening (connection refused), or cut a connection just as the server answers a statement
(the client never learns that its statement committed). The shared server is never touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections import Counter
from collections.abc import Iterator

_STARTUP = 196608  # protocol 3.0; the untyped messages before it are SSL/GSS requests


class Wire:
    """A relay to ``host:port``; :meth:`start` it, point a pool at :attr:`port`."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.upstream = host, port
        self.port = 0
        self.sent: Counter[str] = Counter()  # client messages by type: "S" Sync, "Q" Query
        self.cut_on_reply = False  # cut the line when the server answers the next Execute
        self.cuts = 0
        self._server: asyncio.Server | None = None
        self._lines: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._armed: set[asyncio.StreamWriter] = set()

    @property
    def round_trips(self) -> int:
        """Round trips the clients made: each ``Sync``, ``Flush`` or simple ``Query`` waits."""
        return self.sent["S"] + self.sent["H"] + self.sent["Q"]

    async def start(self) -> None:
        """Listen (again, on the same port after :meth:`stop`)."""
        self._server = await asyncio.start_server(self._line, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop listening and drop every connection: Postgres is gone, for the client."""
        if self._server is not None:
            self._server.close()
            self.drop()
            await self._server.wait_closed()
            self._server = None

    def drop(self) -> None:
        """Cut every connection at once, as a server crash or a network failure would."""
        for client, server in list(self._lines):
            client.transport.abort()
            server.transport.abort()

    async def _line(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(self.host, self.upstream)
        except OSError:
            client_w.transport.abort()
            return
        line = (client_w, server_w)
        self._lines.add(line)
        try:
            await asyncio.gather(
                self._up(client_r, server_w, client_w),
                self._down(server_r, client_w, server_w),
                return_exceptions=True,
            )
        finally:
            self._lines.discard(line)
            self._armed.discard(client_w)
            client_w.transport.abort()
            server_w.transport.abort()

    async def _up(
        self,
        reader: asyncio.StreamReader,
        server: asyncio.StreamWriter,
        client: asyncio.StreamWriter,
    ) -> None:
        with _closing(server), contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:  # untyped messages until the startup packet
                head = await reader.readexactly(8)
                length, code = struct.unpack("!ii", head)
                server.write(head + await reader.readexactly(length - 8))
                if code == _STARTUP:
                    break
            executed = False
            while True:
                kind = await reader.readexactly(1)
                head = await reader.readexactly(4)
                body = await reader.readexactly(struct.unpack("!i", head)[0] - 4)
                tag = kind.decode()
                self.sent[tag] += 1
                executed = executed or tag == "E"
                if tag == "S":
                    if executed and self.cut_on_reply:
                        self._armed.add(client)
                    executed = False
                server.write(kind + head + body)
                await server.drain()

    async def _down(
        self,
        reader: asyncio.StreamReader,
        client: asyncio.StreamWriter,
        server: asyncio.StreamWriter,
    ) -> None:
        with _closing(client), contextlib.suppress(ConnectionError):
            while chunk := await reader.read(65536):
                if client in self._armed:
                    # The server answered: the statement ran and committed. The client never
                    # hears of it, as when a connection dies between commit and reply.
                    self.cut_on_reply = False
                    self.cuts += 1
                    client.transport.abort()
                    server.transport.abort()
                    return
                client.write(chunk)
                await client.drain()


@contextlib.contextmanager
def _closing(writer: asyncio.StreamWriter) -> Iterator[None]:
    """Close ``writer`` when one direction ends, so the other side sees the end too."""
    try:
        yield
    finally:
        writer.close()  # after what is buffered: a Terminate still reaches the server
