"""Journaled LangGraph tools across a real SIGKILL: a call's effect once, never twice unknowingly.

A worker (``journal_run.py``) runs a ``create_agent`` whose model calls ``pay`` (a new
random call id each time it is asked, as a provider would) and kills itself inside the
tool after its effect (a ledger line) or after its result was recorded; a fresh process
carries the turn on through the integration's resume path: a takeover of the service's
turn (:class:`LangGraphAgent`), the same prompt again (:class:`SteeringMiddleware`, no
checkpointer), or the checkpoint (:class:`SteerableSaver`). The model is asked for the call
once: the reply was stored before the tool ran, so the call keeps its id, its reply's id
and its key (made of both).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from steerable.integrations.langgraph import from_stored
from steerable.journal import UNKNOWN, call_key
from steerable.stores.url import open_url
from tests.integrations.langgraph.chat import valid
from tests.integrations.langgraph.support import shape
from tests.ledger import ledger_lines, run_worker

pytestmark = pytest.mark.slow

# point, idempotent: ledger lines after the resume, the tool result the model reads
CASES = {
    "interrupted": ("in-tool", False, 1, UNKNOWN),
    "interrupted, idempotent": ("in-tool", True, 2, "paid 5"),
    "recorded": ("after-end", False, 1, "paid 5"),
}

# the entry point (and its resume path), the store
WHERE = [("agent", "sqlite"), ("agent", "postgres"), ("middleware", "sqlite"), ("saver", "sqlite")]


@asynccontextmanager
async def _url(kind: str, tmp_path: Path) -> AsyncIterator[str]:
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'journal.db'}"
        return
    from tests.stores.postgres.support import fresh_database, url_of  # asyncpg: this store

    async with fresh_database("steerable_lg_journal_") as name:
        yield url_of(name)


async def _worker(url: str, mode: str, point: str, role: str, idempotent: bool, tmp: Path) -> Any:
    args = ("-m", "tests.integrations.langgraph.journal_run", url, mode, point, role)
    files = (str(tmp / "ledger"), str(tmp / "requests.jsonl"))
    return await run_worker((*args, "yes" if idempotent else "no", *files), killed=role == "first")


def _ledger(tmp: Path) -> list[list[str]]:
    return ledger_lines(tmp / "ledger")


def _requests(tmp: Path) -> list[list[dict[str, Any]]]:
    lines = (tmp / "requests.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


@pytest.mark.parametrize(("mode", "kind"), WHERE, ids=["-".join(w) for w in WHERE])
@pytest.mark.parametrize("case", list(CASES))
async def test_a_journaled_langgraph_call_is_never_run_twice_unknowingly(
    mode: str, kind: str, case: str, tmp_path: Path
) -> None:
    point, idempotent, lines, result = CASES[case]
    async with _url(kind, tmp_path) as url:
        await _worker(url, mode, point, "first", idempotent, tmp_path)
        assert len(_ledger(tmp_path)) == 1
        resumed = await _worker(url, mode, point, "resume", idempotent, tmp_path)
        reply = resumed["reply"]  # the checkpoint's (saver), else the stored reply's id:
        if mode != "saver":
            async with open_url(url) as store:
                stored = await store.messages("s")
            assert shape(stored) == ["user:pay", "ai", "tool", "ai"]
            assert valid(from_stored(stored))
            assert reply in (None, stored[1].id)
            reply = stored[1].id

    assert resumed["text"] == f"done: {result}"
    ledger = _ledger(tmp_path)
    assert len(ledger) == lines
    assert len({key for key, _, _ in ledger}) == 1  # one call, one key, on every run of it
    assert [retried for _, retried, _ in ledger] == ["False", "True"][:lines]
    (call,) = {id for _, _, id in ledger}
    # keyed by its reply too, in the session journaled into (the saver's thread's)
    session = "langgraph:s" if mode == "saver" else "s"
    assert ledger[0][0] == call_key(session, f"langgraph/{reply}", call)
    requests = _requests(tmp_path)
    # the model was asked for the call once: the resumed run carried the stored call on
    assert [r for r in requests if not any(m["type"] == "tool" for m in r)] == requests[:1]
    assert requests[0][-1]["type"] == "human"
    answer = requests[-1][-1]
    assert (answer["type"], answer["answers"], answer["text"]) == ("tool", call, result)
    assert answer["status"] == ("error" if result == UNKNOWN else "success")
