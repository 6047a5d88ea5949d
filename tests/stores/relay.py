"""A TCP relay a test puts between a store and its server, to cut the line at will.

The server itself is shared and never touched: :meth:`Relay.cut` drops every connection
through the relay and stops listening (the server is gone, for the client), and
:meth:`Relay.restore` listens again on the same port. The ``outage`` hooks of the server
stores' contract tests are built on it, and so is the Postgres tests' counting relay
(``tests/stores/postgres/wire.py``).
"""

from __future__ import annotations

import asyncio
import contextlib

from steerable.store import Store

Reader = asyncio.StreamReader
Writer = asyncio.StreamWriter


class Relay:
    """Bytes both ways between clients of :attr:`port` and ``host:upstream``.

    A subclass that reads the protocol overrides :meth:`_up` (client to server) and
    :meth:`_down` (server to client); either ending ends the line.
    """

    def __init__(self, host: str, upstream: int) -> None:
        self.host, self.upstream = host, upstream
        self.port = 0
        self._server: asyncio.Server | None = None
        self._lines: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._pipes: set[asyncio.Task[None]] = set()

    async def restore(self) -> None:
        """Listen (again, on the same port after :meth:`cut`); listening already, nothing."""
        if self._server is not None:
            return
        self._server = await asyncio.start_server(self._line, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def cut(self) -> None:
        """Stop listening and drop every connection at once: the server is gone."""
        if self._server is not None:
            server, self._server = self._server, None
            server.close()
            self.drop()
            await server.wait_closed()
        for pipe in list(self._pipes):
            pipe.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)

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
        pipes = [
            asyncio.create_task(self._up(client_r, server_w, client_w)),
            asyncio.create_task(self._down(server_r, client_w, server_w)),
        ]
        self._pipes.update(pipes)
        try:
            await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._lines.discard(line)
            self._ended(client_w)
            for writer in line:
                writer.transport.abort()
            for pipe in pipes:
                pipe.cancel()
                self._pipes.discard(pipe)

    def _ended(self, client: asyncio.StreamWriter) -> None:
        """A line of ``client`` is over (a subclass forgets what it kept for it)."""

    async def _up(self, reader: Reader, server: Writer, client: Writer) -> None:
        await _pipe(reader, server)

    async def _down(self, reader: Reader, client: Writer, server: Writer) -> None:
        await _pipe(reader, client)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()


class RelayLine:
    """An ``outage`` hook's line: ``store`` reaches its server through ``relay``."""

    def __init__(self, relay: Relay, store: Store) -> None:
        self.relay = relay
        self._store = store

    @property
    def store(self) -> Store:
        """The store object whose connections run through the relay."""
        return self._store

    async def cut(self) -> None:
        """The server is gone, for the store."""
        await self.relay.cut()

    async def restore(self) -> None:
        """The server is back, on the same address."""
        await self.relay.restore()
