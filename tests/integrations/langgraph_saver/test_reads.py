"""A new process's read of the latest checkpoint decodes what it returns, not the whole log.

A thread's first records hold its input three times (the input's write, the ``__start__``
channel and the messages channel), so at 300 messages they are most of the log. A saver
with no cache folds every record but decodes a value's base64 only when the checkpoint
read needs it: here, about one copy of the messages. A value that is damaged is still a
``CorruptRecord``: a malformed one when the log is folded, bad base64 when it is read.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig

from steerable.errors import CorruptRecord
from steerable.integrations.langgraph import _saver, _saver_log
from steerable.integrations.langgraph._saver import SteerableSaver
from steerable.messages import Native
from steerable.stores.memory import MemoryStore
from tests.integrations.langgraph_saver.graph import history, react_graph, tool_call

CONFIG: RunnableConfig = {"configurable": {"thread_id": "t"}}


async def _thread(store: MemoryStore) -> list[Any]:
    """A thread of about 300 messages and two tool steps; the graph's final messages."""
    script = iter([tool_call(900), tool_call(901), AIMessage("done")])
    graph = react_graph(SteerableSaver(store), script)
    state = await graph.ainvoke({"messages": history(300)}, CONFIG, durability="sync")
    messages: list[Any] = state["messages"]
    return messages


def _counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The length of every base64 text the saver decodes from now on."""
    decoded: list[int] = []
    decode = _saver_log.decode

    def counting(value: tuple[str, str]) -> tuple[str, bytes]:
        decoded.append(len(value[1]))
        return decode(value)

    monkeypatch.setattr(_saver_log, "decode", counting)
    monkeypatch.setattr(_saver, "decode", counting)
    return decoded


async def test_a_cold_read_decodes_about_one_copy_of_the_messages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The base64 decoded by a fresh saver's read is within 10% of the largest record."""
    store = MemoryStore()
    final = await _thread(store)
    stored = await store.messages("langgraph:t")
    sizes = [len(p.data) for m in stored for p in m.parts if isinstance(p, Native)]
    largest = max(sizes)
    assert sum(sizes) > 2.5 * largest  # the input is stored three times over
    decoded = _counted(monkeypatch)
    latest = await SteerableSaver(store).aget_tuple(CONFIG)
    assert latest is not None and latest.checkpoint["channel_values"]["messages"] == final
    assert largest / 2 < sum(decoded) < 1.1 * largest, (decoded, sizes)


async def _append(store: MemoryStore, body: dict[str, Any]) -> None:
    at = len(await store.messages("langgraph:t"))
    await store.save("langgraph:t", [_saver_log.record(body, "a damaged record")], at=at)


async def _latest_id(store: MemoryStore) -> str:
    latest = await SteerableSaver(store).aget_tuple(CONFIG)
    assert latest is not None
    return str(latest.config["configurable"]["checkpoint_id"])


async def test_bad_base64_in_a_value_read_is_a_corrupt_record() -> None:
    """A pending write of the latest checkpoint with bad base64: its read raises."""
    store = MemoryStore()
    await _thread(store)
    checkpoint = await _latest_id(store)
    bad = {"kind": "writes", "ns": "", "checkpoint": checkpoint, "task": "x", "path": ""}
    await _append(store, {**bad, "writes": [[0, "messages", ["msgpack", "not base64!"]]]})
    with pytest.raises(CorruptRecord, match="bad base64"):
        await SteerableSaver(store).aget_tuple(CONFIG)


async def test_a_malformed_value_is_a_corrupt_record_when_folded() -> None:
    """A write (to no checkpoint read) whose value is no [type, base64] pair: a read raises."""
    store = MemoryStore()
    await _thread(store)
    bad = {"kind": "writes", "ns": "", "checkpoint": "other", "task": "x", "path": ""}
    await _append(store, {**bad, "writes": [[0, "messages", ["msgpack", "AAAA", "more"]]]})
    with pytest.raises(CorruptRecord, match="malformed"):
        await SteerableSaver(store).aget_tuple(CONFIG)
