"""Start one SecantusDB server for the MongoDB store's tests, and stop it at the end.

Here rather than in ``mongodb/`` because the migrations tests of every server store
(``test_server_migrations.py``) ask for it too; nothing else here uses it.

No mongod runs on this machine; SecantusDB (a MongoDB wire-protocol server on WiredTiger)
runs in its own process on a free port and the tests reach it over pymongo, as they would
reach mongod. If it cannot start, the tests skip, or fail when STEERABLE_REQUIRE_SERVERS=1.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, NoReturn

import pytest

if TYPE_CHECKING:
    from tests.stores.mongodb._server import SecantusServer

REQUIRED = os.environ.get("STEERABLE_REQUIRE_SERVERS") == "1"


def unavailable(reason: str) -> NoReturn:
    """Skip, or fail where the servers are required (CI)."""
    if REQUIRED:
        pytest.fail(f"STEERABLE_REQUIRE_SERVERS=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def mongo_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecantusServer]:
    """The shared server; its URI is also in the environment, for the store factory."""
    # imported here: the memory and SQLite tests beside it need no pymongo
    from tests.stores.mongodb._server import URI_VARIABLE, SecantusServer

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
