"""A TCP relay between asyncpg and Postgres: it counts what the client sends and cuts lines.

Tests point a pool at the relay instead of the server. Every message the client sends is
read whole and counted by its protocol type before it goes on, so a test can count round
trips (a ``Sync`` or ``Flush`` ends one in the extended protocol, a ``Query`` in the
simple one). The
relay can also do what every :class:`~tests.stores.relay.Relay` does (drop every
connection, stop listening), and cut a connection just as the server answers a statement
(the client never learns that its statement committed). The shared server is never touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections import Counter
from collections.abc import Iterator

from tests.stores.relay import Reader, Relay, Writer

_STARTUP = 196608  # protocol 3.0; the untyped messages before it are SSL/GSS requests


class Wire(Relay):
    """A relay to ``host:port``; :meth:`restore` it, point a pool at :attr:`port`."""

    def __init__(self, host: str, port: int) -> None:
        super().__init__(host, port)
        self.sent: Counter[str] = Counter()  # client messages by type: "S" Sync, "Q" Query
        self.cut_on_reply = False  # cut the line when the server answers the next Execute
        self.replies_before_cut = 0  # ... after letting this many answers through first
        self.cuts = 0
        self._armed: set[asyncio.StreamWriter] = set()

    @property
    def round_trips(self) -> int:
        """Round trips the clients made: each ``Sync``, ``Flush`` or simple ``Query`` waits."""
        return self.sent["S"] + self.sent["H"] + self.sent["Q"]

    def _ended(self, client: asyncio.StreamWriter) -> None:
        self._armed.discard(client)

    async def _up(self, reader: Reader, server: Writer, client: Writer) -> None:
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
                    if executed and self.cut_on_reply and self.replies_before_cut:
                        self.replies_before_cut -= 1
                    elif executed and self.cut_on_reply:
                        self._armed.add(client)
                    executed = False
                server.write(kind + head + body)
                await server.drain()

    async def _down(self, reader: Reader, client: Writer, server: Writer) -> None:
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


async def no_reset(connection: object) -> None:
    """A pool reset that sends nothing: the store leaves no session state behind."""
