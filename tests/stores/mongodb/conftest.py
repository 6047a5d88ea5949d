"""Start one SecantusDB server for the MongoDB store's tests, and stop it at the end.

No mongod runs on this machine; SecantusDB (a MongoDB wire-protocol server on WiredTiger)
runs in its own process on a free port and the tests reach it over pymongo, as they would
reach mongod. If it cannot start, the tests skip, or fail when STEERABLE_REQUIRE_SERVERS=1.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.stores.mongodb._server import URI_VARIABLE, SecantusServer


def unavailable(reason: str) -> None:
    """Skip, or fail where the servers are required (CI)."""
    if os.environ.get("STEERABLE_REQUIRE_SERVERS") == "1":
        pytest.fail(f"STEERABLE_REQUIRE_SERVERS=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def mongo_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecantusServer]:
    """The shared server; its URI is also in the environment, for the store factory."""
    server = SecantusServer(tmp_path_factory.mktemp("secantus") / "data")
    try:
        server.start()
    except (RuntimeError, OSError) as exc:
        unavailable(f"the SecantusDB test server cannot start: {exc}")
    os.environ[URI_VARIABLE] = server.uri
    try:
        yield server
    finally:
        server.stop()
        os.environ.pop(URI_VARIABLE, None)
