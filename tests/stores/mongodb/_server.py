"""A SecantusDB server in its own process, and the store factory the tests open.

SecantusDB speaks MongoDB's wire protocol over WiredTiger; it is GPL and test-only, so it
runs as a separate program (``python -m secantus``) and nothing here imports it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pymongo import AsyncMongoClient, MongoClient
from pymongo.errors import PyMongoError

from steerable.stores.mongodb import MongoStore, migrate

URI_VARIABLE = "STEERABLE_TEST_MONGODB_URI"


def sync_client(uri: str, **options: Any) -> MongoClient[dict[str, Any]]:
    """A blocking client, for set-up and for looking behind the store's back."""
    return MongoClient(uri, **options)


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class SecantusServer:
    """``python -m secantus`` on ``port``, keeping its data in ``data``."""

    def __init__(self, data: Path, port: int | None = None) -> None:
        self.data = data
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.log = data.parent / f"{data.name}.log"

    @property
    def uri(self) -> str:
        """The server's MongoDB URI."""
        return f"mongodb://127.0.0.1:{self.port}/?directConnection=true"

    def start(self, timeout: float = 30.0) -> None:
        """Start the server and wait until it answers a ping; RuntimeError if it does not."""
        config = self.data.parent / "secantusd.toml"
        config.touch()  # an empty config: no secantusd.toml found elsewhere applies
        command = [sys.executable, "-m", "secantus", "--config", str(config), "--host"]
        command += ["127.0.0.1", "--port", str(self.port), "--storage-path", str(self.data)]
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [*command, "--log-level", "WARNING"],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.data.parent,
            )
        deadline = time.monotonic() + timeout
        with sync_client(self.uri, serverSelectionTimeoutMS=250) as client:
            while True:
                try:
                    client.admin.command("ping")
                    return
                except PyMongoError as exc:
                    code = self.process.poll()
                    if code is None and time.monotonic() < deadline:
                        continue
                    self.stop()
                    why = f"exited with code {code}" if code is not None else f"is silent: {exc}"
                    tail = self.log.read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"SecantusDB {why}; its log ends:\n{tail}") from exc

    def version(self) -> str:
        """What the server says it is."""
        with sync_client(self.uri, serverSelectionTimeoutMS=2000) as client:
            info: dict[str, Any] = client.admin.command("buildInfo")
        return str(info.get("version"))

    def stop(self) -> None:
        """Stop the server the way an operator would (SIGTERM), killing it if it hangs."""
        if self.process is None:
            return
        process, self.process = self.process, None
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@asynccontextmanager
async def open_store(database: str, **client_options: Any) -> AsyncIterator[MongoStore]:
    """A MongoStore on ``database`` of the test server, over a client of its own.

    Module level and given only a name, so ``functools.partial(open_store, name)`` pickles
    and the conformance suite's takers in other processes can open it too.
    """
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        os.environ[URI_VARIABLE], **client_options
    )
    try:
        await migrate(client[database])  # what the application runs when it deploys
        yield MongoStore(client[database])
    finally:
        await client.close()


@asynccontextmanager
async def scratch_database() -> AsyncIterator[Any]:
    """An empty database of its own on the test server, dropped at the end of the block."""
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(os.environ[URI_VARIABLE])
    database = client[f"steerable_migrations_{uuid.uuid4().hex[:8]}"]
    try:
        yield database
        await client.drop_database(database.name)
    finally:
        await client.close()


@asynccontextmanager
async def scratch_url() -> AsyncIterator[str]:
    """The store URL (``steerable.stores.url``) of a fresh migrated database, dropped after.

    For processes the test kills: before the drop, every session's open transaction is
    aborted (``killAllSessions``). A killed client's transaction would otherwise hold its
    documents for 60 s (mongod's ``transactionLifetimeLimitSeconds``; SecantusDB's too)
    and the drop would wait for it.
    """
    async with scratch_database() as database:
        await migrate(database)
        address = urlsplit(os.environ[URI_VARIABLE])
        yield urlunsplit(("mongodb", address.netloc, f"/{database.name}", address.query, ""))
        await database.client.admin.command("killAllSessions", [])
