"""A session whose stored transcript has an orphaned tool call (a reply whose call never got
a result, then the conversation went on), served by ``steerable serve``: the next turn
repairs it once, stores the repair, says so in the server's log, and answers; the turn
after repairs nothing. On SQLite and Postgres (the swap itself runs the store contract on
every store).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from steerable import Message, ToolCall, transcript_problems, user
from steerable.repair import ORPHANED
from steerable.service.client import Client
from steerable.stores.url import open_url
from tests.cli.test_serve import Served

pytestmark = pytest.mark.slow


@pytest.fixture(params=["sqlite", "postgres"])
async def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A fresh store: a SQLite file, or a migrated Postgres database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'repair.db'}"
        return
    from tests.stores.postgres.support import fresh_database, url_of

    async with fresh_database("steerable_repair_") as name:
        yield url_of(name)


async def test_a_served_turn_repairs_an_orphaned_call_once(store_url: str, tmp_path: Path) -> None:
    broken = [
        user("look it up"),
        Message("assistant", (ToolCall("lost", "lookup", "{}"),), id="reply"),
        user("and then?"),
    ]
    async with open_url(store_url) as store:  # the server keeps a tenant's session under it
        await store.save("default/s", broken, at=0)
    served = Served(store_url, "--poll", "0.1", log=tmp_path / "serve.log").start()
    try:
        async with Client(served.url) as client:
            for turn in ("t1", "t2"):
                await client.send("s", f"prompt {turn}", id=turn)
                done = await client.turn("s", turn, wait=60)
                assert done["state"] == "completed", done
    finally:
        served.kill()
    async with open_url(store_url) as store:
        stored = await store.messages("default/s")
    assert transcript_problems(stored) == []
    ids = [m.id for m in stored]
    assert ids[:4] == [broken[0].id, "reply", "reply.results", broken[2].id]
    assert stored[2].tool_results[0].content == ORPHANED
    assert ids[4:] and ids.count("t1") == 1 and ids.count("t2") == 1
    assert stored[3].id == broken[2].id
    assert served.text().count("repaired orphaned tool calls from position 2") == 1
