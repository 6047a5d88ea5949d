"""``list(None)`` lists every thread's checkpoints, and metadata comes back whole.

Checkpoints on three threads (two namespaces on one) are listed by ``list(None)`` newest
first across threads, with ``filter``, ``before`` and ``limit`` as LangGraph's savers apply
them, by this saver and by a new one (another process's, reading the saver's index of
threads). A deleted thread lists nothing; a saver of another prefix lists only its own; the
prefix ``""`` has no index and says so. A metadata key named ``writes`` is kept, as
InMemorySaver and SqliteSaver keep it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6

from steerable.errors import UsageError
from steerable.integrations.langgraph._saver import SteerableSaver
from tests.integrations.langgraph_saver.stores import open_store

KINDS = ["sqlite", "postgres"]


def _config(thread: str, ns: str = "") -> RunnableConfig:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}


async def _put(saver: SteerableSaver, thread: str, ns: str, n: int, **meta: Any) -> str:
    checkpoint = empty_checkpoint()
    checkpoint["id"] = str(uuid6(clock_seq=n))
    metadata: Any = {"n": n, **meta}
    stored = await saver.aput(_config(thread, ns), checkpoint, metadata, {})
    return str(stored["configurable"]["checkpoint_id"])


async def _listed(saver: SteerableSaver, **options: Any) -> list[tuple[str, object]]:
    """(thread, n) of each checkpoint ``alist(None, ...)`` gives, in its order."""
    return [
        (t.config["configurable"]["thread_id"], dict(t.metadata)["n"])
        async for t in saver.alist(None, **options)
    ]


@pytest.mark.parametrize("kind", KINDS)
async def test_list_none_lists_every_thread_newest_first(kind: str, tmp_path: Path) -> None:
    async with open_store(kind, tmp_path) as store:
        saver = SteerableSaver(store)
        ids = [
            await _put(saver, "a", "", 0, source="input"),
            await _put(saver, "b", "", 1, source="loop"),
            await _put(saver, "b", "inner", 2, source="loop"),
            await _put(saver, "c", "", 3, source="loop"),
        ]
        everything = [("c", 3), ("b", 2), ("b", 1), ("a", 0)]
        assert await _listed(saver) == everything
        assert await _listed(SteerableSaver(store)) == everything  # a new process's saver
        assert await _listed(saver, filter={"source": "input"}) == [("a", 0)]
        assert await _listed(saver, before=_config_of("b", "", ids[1])) == [("a", 0)]
        assert await _listed(saver, limit=2) == [("c", 3), ("b", 2)]
        assert await _listed(saver, filter={"source": "loop"}, limit=1) == [("c", 3)]
        assert await _listed(saver, limit=0) == []
        # the sync twin, from another thread
        assert [t.metadata["n"] for t in await _in_thread(saver)] == [3, 2, 1, 0]
        await saver.adelete_thread("b")
        assert await _listed(SteerableSaver(store)) == [("c", 3), ("a", 0)]
        # another prefix's saver over the same store has threads of its own
        other = SteerableSaver(store, prefix="other:")
        await _put(other, "a", "", 9)
        assert await _listed(other) == [("a", 9)]
        assert await _listed(saver) == [("c", 3), ("a", 0)]


def _config_of(thread: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}
    }


async def _in_thread(saver: SteerableSaver) -> list[Any]:
    return await asyncio.to_thread(lambda: list(saver.list(None)))


async def test_list_none_without_a_prefix_and_a_bad_limit_are_usage_errors(
    tmp_path: Path,
) -> None:
    async with open_store("sqlite", tmp_path) as store:
        bare = SteerableSaver(store, prefix="")
        await _put(bare, "a", "", 0)
        with pytest.raises(UsageError, match="prefix ''"):
            await _listed(bare)
        assert [dict(t.metadata)["n"] async for t in bare.alist(_config("a"))] == [0]
        saver = SteerableSaver(store)
        for bad in ("2", -1, True, 1.5):
            with pytest.raises(UsageError, match="limit"):
                await _listed(saver, limit=bad)


@pytest.mark.parametrize("kind", KINDS)
async def test_a_metadata_key_named_writes_is_kept(kind: str, tmp_path: Path) -> None:
    async with open_store(kind, tmp_path) as store:
        saver = SteerableSaver(store)
        await _put(saver, "a", "", 0, writes={"node": {"out": 1}}, step=1)
        latest = await SteerableSaver(store).aget_tuple(_config("a"))
        assert latest is not None
        assert latest.metadata == {"n": 0, "writes": {"node": {"out": 1}}, "step": 1}
        found = await _listed(saver, filter={"writes": {"node": {"out": 1}}})
        assert found == [("a", 0)]
