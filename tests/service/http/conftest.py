"""A real server for the HTTP tests: uvicorn on a loopback port, in a thread of its own.

The app, its Service and its store live on the server thread's event loop (as in a
process of ``steerable serve``); a test talks to it over HTTP only, from its own loop,
with httpx. :meth:`LiveServer.call` runs a coroutine on the server's loop, to look inside.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from steerable.service import Service
from steerable.service.demo import demo_agent
from steerable.service.http import LocalLive, create_app, live_feed
from steerable.stores.url import open_url

T = TypeVar("T")
Build = Callable[[], AbstractAsyncContextManager[FastAPI]]


class LiveServer:
    """uvicorn serving the app ``build`` makes, on 127.0.0.1 and a free port."""

    def __init__(self, build: Build) -> None:
        self.build = build
        self.app: FastAPI | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: uvicorn.Server | None = None
        self._ready = threading.Event()
        self._failed: BaseException | None = None
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported to the test by start()
            self._failed = exc
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        async with self.build() as app:
            self.app = app
            config = uvicorn.Config(
                app, log_level="warning", lifespan="on", ws="none", http="h11", access_log=False
            )
            self._server = uvicorn.Server(config)
            serving = asyncio.create_task(self._server.serve(sockets=[self._socket]))
            while not self._server.started and not serving.done():  # noqa: ASYNC110 - uvicorn has no event
                await asyncio.sleep(0.01)
            self._ready.set()
            await serving

    def start(self) -> LiveServer:
        """Start serving; returns once it accepts connections."""
        self._thread.start()
        if not self._ready.wait(30) or self._failed is not None:
            raise RuntimeError(f"the server did not start: {self._failed!r}")
        return self

    def call(self, make: Callable[[], Awaitable[T]]) -> T:
        """Run ``make()`` on the server's loop and return its result."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(_wrap(make), self._loop).result(30)

    def stop(self) -> None:
        """Stop serving and wait for the thread."""
        if self._server is not None:
            self._server.should_exit = True
        self._thread.join(30)
        self._socket.close()


async def _wrap(make: Callable[[], Awaitable[T]]) -> T:
    return await make()


def app_over(
    url: str,
    *,
    agent: Any = None,
    tokens: dict[str, str] | None = None,
    serve: bool = True,
    replica: str | None = None,
    service_options: dict[str, Any] | None = None,
    **options: Any,
) -> Build:
    """A builder of the app over the store at ``url``, with the demo agent by default;
    ``service_options`` go to the Service, the other options to ``create_app``."""

    @asynccontextmanager
    async def build() -> AsyncIterator[FastAPI]:
        async with open_url(url) as store:
            live = live_feed(store) if url.startswith("postgres") else LocalLive()
            service = Service(
                store,
                demo_agent(seconds=0.3) if agent is None else agent,
                poll=0.05,
                live=live.sink,
                replica=replica,
                **(service_options or {}),
            )
            yield create_app(service, tokens=tokens, live=live, serve=serve, **options)

    return build


@pytest.fixture
def serve_app() -> Iterator[Callable[[Build], LiveServer]]:
    """Start servers for the test; every one stopped at teardown."""
    started: list[LiveServer] = []

    def start(build: Build) -> LiveServer:
        server = LiveServer(build).start()
        started.append(server)
        return server

    yield start
    for server in reversed(started):
        server.stop()


@pytest.fixture(params=["memory", "sqlite"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The store of the test: memory, or a fresh SQLite file."""
    return "memory:" if request.param == "memory" else f"sqlite:///{tmp_path / 'http.db'}"


@pytest.fixture
async def client(
    serve_app: Callable[[Build], LiveServer], store_url: str
) -> AsyncIterator[httpx.AsyncClient]:
    """A client of a server over the test's store, with no tokens (tenant ``default``)."""
    server = serve_app(app_over(store_url))
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        yield http


@dataclass
class Frame:
    """One SSE event as a client reads it."""

    event: str = "message"
    id: str | None = None
    data: str = ""
    comments: list[str] = field(default_factory=list)

    def json(self) -> Any:
        """The data, parsed."""
        return json.loads(self.data)


async def frames(response: httpx.Response) -> AsyncIterator[Frame]:
    """The frames of an SSE response (comments come as frames with only ``comments``)."""
    frame = Frame()
    async for line in response.aiter_lines():
        if line == "":
            if frame.data or frame.id is not None or frame.comments:
                yield frame
            frame = Frame()
        elif line.startswith(":"):
            frame.comments.append(line[1:].strip())
        else:
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "event":
                frame.event = value
            elif name == "id":
                frame.id = value
            elif name == "data":
                frame.data = value if not frame.data else frame.data + "\n" + value


@pytest.fixture
async def postgres_url() -> AsyncIterator[str]:
    """A fresh, migrated Postgres database of this test, as a store URL; dropped after."""
    from urllib.parse import urlsplit, urlunsplit

    from tests.stores.postgres.support import DSN, fresh_database

    parts = urlsplit(DSN)
    async with fresh_database("steerable_http_") as name:
        yield urlunsplit((parts.scheme, parts.netloc, f"/{name}", "pool=4", ""))
