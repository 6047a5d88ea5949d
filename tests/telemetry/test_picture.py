"""``scripts/trace_picture.py``: the steered turn it pictures has the span tree the docs show
(docs/observability.md), and its page renders in Chromium (skipped without it)."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "trace_picture", ROOT / "scripts" / "trace_picture.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


picture = _script()


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    spans = asyncio.run(picture.steered_turn(tmp_path_factory.mktemp("picture")))
    found: list[Any] = picture.tree(spans)
    return found


def test_the_tree_of_a_steered_turn(rows: list[Any]) -> None:
    shape = [(r.name, r.depth, r.parent) for r in rows]
    turn = "invoke_agent ReActAgent"
    assert shape == [
        ("client request", 0, None),
        ("steerable send", 1, "client request"),
        (turn, 2, "steerable send"),
        ("chat m-1", 3, turn),
        ("execute_tool look", 3, turn),
        ("execute_tool look", 3, turn),
        ("chat m-1", 3, turn),
        ("steerable steer", 0, None),  # a trace of its own: another Service sent it
    ]
    client, _, invoke, first, _, _, second, steer = (r.span for r in rows)
    assert steer.context.trace_id != client.context.trace_id
    assert {r.span.context.trace_id for r in rows[:7]} == {client.context.trace_id}
    assert [x.context.span_id for x in second.links] == [steer.context.span_id]
    assert [x.context.span_id for x in invoke.links] == [steer.context.span_id]
    assert list(first.links) == []
    assert second.attributes["steerable.step"] == 2
    assert second.attributes["steerable.steers"] == 1
    assert [e.name for e in invoke.events] == ["steerable.steers_taken"]
    text = picture.text(rows)
    assert "link -> steerable steer" in text
    assert "event steerable.steers_taken" in text


def test_the_page_renders(rows: list[Any], tmp_path: Path) -> None:
    if not os.access(picture.CHROMIUM, os.X_OK):
        pytest.skip(f"no {picture.CHROMIUM} (Debian: apt-get install chromium)")
    pytest.importorskip("playwright.async_api")
    content = picture.page(rows)
    assert content.count('class="bar ') == len(rows)
    assert content.count('marker-end="url(#arrow') == 2  # the chat span's link, the turn's
    out = tmp_path / "trace.png"
    asyncio.run(picture.screenshot(content, out))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
