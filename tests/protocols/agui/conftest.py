"""Fixtures of the AG-UI tests: in-process servers (the HTTP tests' :class:`LiveServer`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.service.http.conftest import Build, LiveServer


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
