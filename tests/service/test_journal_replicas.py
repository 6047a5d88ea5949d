"""A ``steerable serve`` replica SIGKILLed inside a tool with side effects; another replica
carries the turn on. The tool took effect once and the model was told its outcome is
unknown, or (idempotent) it ran again under the same key: never twice unknowingly.

Replica A is started alone (so it claims the turn), with a ``pay`` tool that kills its own
process right after its effect; once A is dead, replica B (whose tool does not die) is
started on the same store and claims the turn when A's lease expires.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from steerable import transcript_problems
from steerable.journal import UNKNOWN
from steerable.service.client import Client
from steerable.stores.url import open_url
from tests.cli.test_serve import Served
from tests.service.replicas import until

pytestmark = pytest.mark.slow


@pytest.fixture(params=["sqlite", "postgres"])
async def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A fresh store for the replicas: a SQLite file, or a migrated Postgres database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'journal.db'}"
        return
    from tests.stores.postgres.support import fresh_database, url_of

    async with fresh_database("steerable_journal_") as name:
        yield url_of(name)


def _replica(url: str, agent: str, tmp_path: Path, name: str, *, die: bool) -> Served:
    env = {"STEERABLE_TEST_LEDGER": str(tmp_path / "ledger")}
    if die:
        env["STEERABLE_TEST_DIE_IN_TOOL"] = "1"
    flags = ("--agent", f"tests.service.journal_agent:{agent}", "--lease", "1", "--poll", "0.1")
    return Served(url, *flags, "--replica-id", name, log=tmp_path / f"{name}.log", env=env)


def _ledger(tmp_path: Path) -> list[list[str]]:
    path = tmp_path / "ledger"
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize("agent", ["paying", "paying_idempotent"])
async def test_a_replica_killed_inside_a_tool_never_runs_it_twice_unknowingly(
    store_url: str, agent: str, tmp_path: Path
) -> None:
    a = _replica(store_url, agent, tmp_path, "a", die=True).start()
    b = _replica(store_url, agent, tmp_path, "b", die=False)
    try:
        async with Client(a.url) as client:
            await client.send("s", "pay the bill", id="t")

        async def a_died() -> bool:
            return a.process is not None and a.process.poll() is not None

        await until(a_died, "replica a killed itself inside the tool")
        assert len(_ledger(tmp_path)) == 1
        b.start()
        async with Client(b.url) as client:
            turn = await client.turn("s", "t", wait=60)
            transcript = await client.transcript("s")
    finally:
        a.kill()
        b.kill()
    lines = _ledger(tmp_path)
    assert turn["state"] == "completed", turn
    assert len({key for _, key, _ in lines}) == 1  # one call, one key
    if agent == "paying":
        assert len(lines) == 1
        assert turn["output"] == f"done: {UNKNOWN}"
    else:
        assert [retried for _, _, retried in lines] == ["False", "True"]
        assert lines[0][0] != lines[1][0]  # a's process, then b's
        assert turn["output"] == "done: paid 5"
    assert len(transcript["messages"]) == 4  # the prompt, the call, its one result, the answer
    async with open_url(store_url) as store:
        assert transcript_problems(await store.messages("s")) == []
