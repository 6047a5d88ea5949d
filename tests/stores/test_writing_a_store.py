"""docs/stores.md stays true: its "writing a store" test runs as written, in a project of its
own with only steerable installed (no conftest, no pytest-asyncio), on a store of its own."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs" / "stores.md"

# the third party's store: SQLite under another name, opened by path
MY_STORE = """
from pathlib import Path
from steerable.stores.sqlite import SQLiteStore

def open_my_store(name: str) -> SQLiteStore:
    return SQLiteStore(Path(__file__).parent / f"{name}.db")
"""


@pytest.mark.slow
def test_the_documented_store_test_runs_every_case(tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(), re.S)
    # the first store test the page shows (the later one, of a server store, is a sketch)
    examples = [block for block in blocks if "class TestMyStore(StoreContract)" in block]
    assert examples, "docs/stores.md shows a store test"
    example = examples[0]
    (tmp_path / "my_store.py").write_text(MY_STORE)
    (tmp_path / "test_my_store.py").write_text(example)
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = --strict-markers\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:asyncio", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    summary = done.stdout.strip().splitlines()[-1]
    assert re.match(r"\d+ passed, \d+ skipped in", summary), summary
    assert "the store does not declare 'lockable'" in done.stdout  # skipped, with the reason
