"""A SecantusDB server (MongoDB's wire protocol) for the saver's MongoDB runs.

Started once for this directory, the way ``tests/stores/conftest.py`` starts the store
tests' one, and only when a MongoDB test asks for it. If it cannot start, the test skips,
or fails when ``STEERABLE_REQUIRE_SERVERS=1``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integrations.langgraph_saver.stores import unavailable


@pytest.fixture(scope="session")
def saver_mongo_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URI of a SecantusDB server of this directory's own."""
    # imported here: the other stores need no pymongo
    from tests.stores.mongodb._server import SecantusServer

    server = SecantusServer(tmp_path_factory.mktemp("saver-secantus") / "data")
    try:
        server.start()
    except (RuntimeError, OSError) as exc:
        unavailable(f"the SecantusDB test server cannot start: {exc}")
    try:
        yield server.uri
    finally:
        server.stop()
