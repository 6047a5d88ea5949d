"""The tool journal's three cases across a real SIGKILL, on every persistent store.

A worker process (``journal_worker.py``) runs a turn whose model calls ``pay``, a tool with
side effects whose effect is a line in a ledger file, and kills itself at one point; a
fresh process then carries the turn on from the store. Whatever the point, the tool took
effect once, or (killed inside it, not idempotent) the model was told its outcome is
unknown; never twice unknowingly. An idempotent tool killed inside runs again, under the
same key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from steerable import transcript_problems
from steerable.journal import UNKNOWN
from steerable.stores.url import open_url
from tests.ledger import ledger_lines, run_worker
from tests.stores.test_rewrite_crash import store_url

__all__ = ["store_url"]  # the fixture, used by name

WORKER = Path(__file__).with_name("journal_worker.py")

pytestmark = pytest.mark.slow


async def _worker(url: str, point: str, role: str, idempotent: bool, ledger: Path) -> Any:
    rest = (point, role, "yes" if idempotent else "no", str(ledger))
    return await run_worker((str(WORKER), url, "journal", *rest), killed=role == "first")


def _lines(ledger: Path) -> list[tuple[str, str]]:
    return [(key, retried) for key, retried in ledger_lines(ledger)]


# point, idempotent: ledger lines after the kill, after the resume, the output, replayed
CASES = {
    "never begun": ("before-begin", False, 0, 1, "done: paid 5", [False]),
    "recorded": ("after-end", False, 1, 1, "done: paid 5", [True]),
    "interrupted": ("in-tool", False, 1, 1, f"done: {UNKNOWN}", [False]),
    "interrupted, idempotent": ("in-tool", True, 1, 2, "done: paid 5", [False]),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_a_journaled_call_is_never_run_twice_unknowingly(
    store_url: str, case: str, tmp_path: Path
) -> None:
    point, idempotent, after_kill, after_resume, output, replayed = CASES[case]
    ledger = tmp_path / "ledger"
    await _worker(store_url, point, "first", idempotent, ledger)
    assert len(_lines(ledger)) == after_kill
    resumed = await _worker(store_url, point, "resume", idempotent, ledger)
    lines = _lines(ledger)
    assert len(lines) == after_resume
    assert (resumed["reason"], resumed["output"], resumed["replayed"]) == (
        "completed",
        output,
        replayed,
    )
    assert len({key for key, _ in lines}) == 1  # one call, one key, on every run of it
    assert [retried for _, retried in lines] == ["False", "True"][: len(lines)]
    async with open_url(store_url) as store:
        messages = await store.messages("journal")
    assert transcript_problems(messages) == []
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant"]
