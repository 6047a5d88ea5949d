"""``steerable serve`` and ``steerable migrate`` on a database that is not there, as processes.

Each of these is one line on stderr and exit status 1, never a traceback, and says which it
is: the server cannot be reached; it is not accepting connections yet; the database does
not exist; it is not migrated (``serve`` only). On Postgres, MySQL/MariaDB and MongoDB
(SecantusDB). "Not accepting connections yet" comes from a stand-in that answers the
startup packet as a Postgres server does while it starts up (SQLSTATE 57P03).
"""

from __future__ import annotations

import socket
import socketserver
import struct
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

import pytest

from tests.cli.test_serve import cli, empty_postgres, postgres_url
from tests.stores.conftest import REQUIRED, mongo_server

if TYPE_CHECKING:
    from tests.stores.mongodb._server import SecantusServer

__all__ = ["empty_postgres", "mongo_server"]  # fixtures, used by name

pytestmark = pytest.mark.slow

MIGRATE = "run `steerable migrate --store URL`"


def one_line_failure(command: str, url: str, says: str) -> str:
    """``steerable COMMAND --store URL`` fails in one line saying ``says``; the line."""
    done = (
        cli(command, "--store", url, "--port", "0")
        if command == "serve"
        else cli(command, "--store", url)
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"steerable {command}: "), line
    assert says in line, line
    return line


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


# -- Postgres -------------------------------------------------------------------------------


class _StartingUp(socketserver.BaseRequestHandler):
    """Answers a client's startup packet the way Postgres does while it starts up."""

    def handle(self) -> None:
        while True:  # SSL and GSS requests come first, untyped: refuse them, as plain TCP
            head = self.request.recv(8, socket.MSG_WAITALL)
            if len(head) < 8:
                return
            length, code = struct.unpack("!ii", head)
            self.request.recv(length - 8, socket.MSG_WAITALL)
            if code in (80877103, 80877104):
                self.request.sendall(b"N")
                continue
            break
        fields = b"".join(
            kind + text.encode() + b"\0"
            for kind, text in (
                (b"S", "FATAL"),
                (b"V", "FATAL"),
                (b"C", "57P03"),
                (b"M", "the database system is starting up"),
            )
        )
        body = fields + b"\0"
        self.request.sendall(b"E" + struct.pack("!i", len(body) + 4) + body)


@pytest.fixture
def starting_postgres() -> Iterator[str]:
    """The URL of a Postgres stand-in that is still starting up."""
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _StartingUp)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"postgresql://postgres@127.0.0.1:{server.server_address[1]}/test"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.mark.parametrize("command", ["serve", "migrate"])
def test_postgres_not_accepting_connections_yet(command: str, starting_postgres: str) -> None:
    line = one_line_failure(command, starting_postgres, "not accepting connections yet")
    assert "the database system is starting up" in line and "try again" in line


@pytest.mark.parametrize("command", ["serve", "migrate"])
async def test_postgres_unknown_database(command: str, empty_postgres: str) -> None:
    url = empty_postgres.rsplit("/", 1)[0] + "/steerable_no_such_database"
    line = one_line_failure(command, url, "has no database 'steerable_no_such_database'")
    assert "create it" in line and MIGRATE in line


@pytest.mark.parametrize("command", ["serve", "migrate"])
def test_postgres_unreachable(command: str) -> None:
    url = postgres_url("test").replace(f":{_pg_port()}/", f":{free_port()}/")
    one_line_failure(command, url, "cannot reach the Postgres server at 127.0.0.1:")


def _pg_port() -> int:
    from urllib.parse import urlsplit

    from tests.stores.postgres.support import DSN

    return urlsplit(DSN).port or 5432


async def test_postgres_not_migrated(empty_postgres: str) -> None:
    line = one_line_failure("serve", empty_postgres, "the database is not migrated")
    assert line.endswith(f"{MIGRATE} first"), line


# -- MySQL ----------------------------------------------------------------------------------


@pytest.fixture
async def empty_mysql() -> AsyncIterator[str]:
    """The URL of a new, empty MySQL database; dropped after the test."""
    import aiomysql  # type: ignore[import-untyped]

    from tests.stores.mysql import server

    try:
        async with server.scratch_database() as pool:
            [(name,)] = await server.on_pool(pool, "SELECT DATABASE()")
            yield f"mysql://{server.USER}:{server.PASSWORD}@{server.HOST}:{server.PORT}/{name}"
    except (OSError, aiomysql.OperationalError) as exc:
        if REQUIRED:
            pytest.fail(f"STEERABLE_REQUIRE_SERVERS=1 but no MySQL server: {exc}")
        pytest.skip(f"no MySQL server: {exc}")


@pytest.mark.parametrize("command", ["serve", "migrate"])
def test_mysql_unreachable(command: str) -> None:
    url = f"mysql://root@127.0.0.1:{free_port()}/test"
    line = one_line_failure(command, url, "cannot reach the MySQL server at 127.0.0.1:")
    assert MIGRATE not in line  # it was told to migrate, wrongly


@pytest.mark.parametrize("command", ["serve", "migrate"])
async def test_mysql_unknown_database(command: str, empty_mysql: str) -> None:
    url = empty_mysql.rsplit("/", 1)[0] + "/steerable_no_such_database"
    line = one_line_failure(command, url, "has no database 'steerable_no_such_database'")
    assert "create it" in line


async def test_mysql_not_migrated_then_migrated(empty_mysql: str) -> None:
    line = one_line_failure("serve", empty_mysql, "the database is not migrated")
    assert line.endswith(f"{MIGRATE} first"), line
    done = cli("migrate", "--store", empty_mysql)
    assert done.returncode == 0 and done.stdout.startswith("applied migration step(s) 1")


# -- MongoDB (SecantusDB) -------------------------------------------------------------------


@pytest.mark.parametrize("command", ["serve", "migrate"])
def test_mongodb_unreachable(command: str) -> None:
    url = f"mongodb://127.0.0.1:{free_port()}/test?serverSelectionTimeoutMS=500"
    line = one_line_failure(command, url, "cannot reach the MongoDB server at 127.0.0.1:")
    assert "Topology" not in line and MIGRATE not in line


def test_mongodb_unknown_database_is_not_migrated(mongo_server: SecantusServer) -> None:
    # MongoDB makes a database at its first write: one it has not seen is just empty
    name = f"steerable_cli_{uuid.uuid4().hex[:8]}"
    url = f"mongodb://127.0.0.1:{mongo_server.port}/{name}?directConnection=true"
    line = one_line_failure("serve", url, "the database is not migrated")
    assert line.endswith(f"{MIGRATE} first"), line
    done = cli("migrate", "--store", url)
    assert done.returncode == 0 and done.stdout.startswith("applied migration step(s) 1")
