"""The saver's sync interface: ``graph.invoke`` and ``get_state`` in a plain program.

A plain ``def main()`` (no loop running) invokes a graph over a SQLite or memory store, an
``asyncio.run`` then goes on with the same saver from async code, and sync calls work again
after it returned. A Postgres store lives on the loop its pool was made on: sync calls from
another thread run there while it runs, and once it is gone (the pool was made inside an
``asyncio.run`` that returned) they are a clear :class:`UsageError` that stores nothing.
On a loop's own thread (a notebook) a store bound to no loop works; a bound one is a
:class:`UsageError` (the call would block the loop it needs).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Iterator
from contextlib import AsyncExitStack, contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.graph import END, START, MessagesState, StateGraph

from steerable.errors import UsageError
from steerable.integrations.langgraph._saver import SteerableSaver
from steerable.store import Store
from steerable.stores.memory import MemoryStore
from steerable.stores.sqlite import SQLiteStore
from tests.integrations.langgraph_saver.stores import open_store

T = TypeVar("T")
CONFIG: RunnableConfig = {"configurable": {"thread_id": "t"}}


def _config(thread: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def echo_graph(saver: SteerableSaver) -> Any:
    """A graph of one sync node that answers each message with ``echo <text>``."""

    def echo(state: MessagesState) -> dict[str, list[AnyMessage]]:
        return {"messages": [AIMessage(f"echo {state['messages'][-1].text}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("echo", echo)
    builder.add_edge(START, "echo")
    builder.add_edge("echo", END)
    return builder.compile(checkpointer=saver)


def _texts(values: dict[str, Any]) -> list[str]:
    return [m.text for m in values["messages"]]


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_plain_program_invokes_a_graph_then_async_code_goes_on_with_it(
    kind: str, tmp_path: Path
) -> None:
    """invoke/get_state with no loop; then ainvoke in asyncio.run; then invoke again."""
    store: Store = MemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "sync.db")
    saver = SteerableSaver(store)
    graph = echo_graph(saver)
    graph.invoke({"messages": [HumanMessage("one")]}, CONFIG)
    assert _texts(graph.get_state(CONFIG).values) == ["one", "echo one"]

    async def later() -> dict[str, Any]:
        await graph.ainvoke({"messages": [HumanMessage("two")]}, CONFIG)
        state = await graph.aget_state(CONFIG)
        return dict(state.values)

    assert _texts(asyncio.run(later())) == ["one", "echo one", "two", "echo two"]
    graph.invoke({"messages": [HumanMessage("three")]}, CONFIG)
    expected = ["one", "echo one", "two", "echo two", "three", "echo three"]
    assert _texts(graph.get_state(CONFIG).values) == expected
    # a new saver (another process's) reads what the sync and async calls stored
    assert _texts(echo_graph(SteerableSaver(store)).get_state(CONFIG).values) == expected
    if isinstance(store, SQLiteStore):
        asyncio.run(store.close())


class LoopThread:
    """An event loop running in a thread, as a sync program keeps one for its pool."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, work: Awaitable[T]) -> T:
        """``work`` run on the loop, waited for here."""

        async def wrapped() -> T:
            return await work

        return asyncio.run_coroutine_threadsafe(wrapped(), self.loop).result()

    def close(self) -> None:
        """Stop the loop and its thread."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


@contextmanager
def _postgres_on(loop: LoopThread, tmp_path: Path) -> Iterator[Store]:
    """A fresh Postgres store whose pool is made on ``loop`` (dropped after)."""
    stack = AsyncExitStack()
    try:
        yield loop.run(stack.enter_async_context(open_store("postgres", tmp_path)))
    finally:
        loop.run(stack.aclose())


def test_postgres_from_a_plain_program_while_its_loop_runs_in_a_thread(tmp_path: Path) -> None:
    """The saver made on the pool's loop: sync calls from here run there; async ones too."""
    loop = LoopThread()
    try:
        with _postgres_on(loop, tmp_path) as store:

            async def make() -> SteerableSaver:
                return SteerableSaver(store)

            saver = loop.run(make())
            graph = echo_graph(saver)
            graph.invoke({"messages": [HumanMessage("one")]}, CONFIG)
            assert _texts(graph.get_state(CONFIG).values) == ["one", "echo one"]
            loop.run(graph.ainvoke({"messages": [HumanMessage("two")]}, CONFIG))
            assert _texts(graph.get_state(CONFIG).values) == ["one", "echo one", "two", "echo two"]
            assert [t.metadata["step"] for t in saver.list(None)] == [4, 3, 2, 1, 0, -1]
    finally:
        loop.close()


def test_postgres_made_in_an_asyncio_run_that_returned_is_a_clear_error() -> None:
    """Its pool's loop stopped, then closed: a UsageError naming what to do; nothing stored."""
    from steerable.stores.postgres import PostgresStore
    from tests.stores.postgres.support import create_pool, fresh_database

    loop = LoopThread()  # the test database lives on a loop of its own
    stack = AsyncExitStack()
    try:
        name = loop.run(stack.enter_async_context(fresh_database("steerable_saver_")))

        async def make() -> tuple[SteerableSaver, Any]:
            pool = await create_pool(name)
            return SteerableSaver(PostgresStore(pool)), pool

        # as asyncio.run does, but the pool can be closed after: the loop stops, then closes
        made = asyncio.new_event_loop()
        saver, pool = made.run_until_complete(make())
        graph = echo_graph(saver)
        with pytest.raises(UsageError, match=r"asyncio\.run\(\) return.*Use the async ones"):
            graph.invoke({"messages": [HumanMessage("one")]}, CONFIG)
        made.run_until_complete(pool.close())
        made.close()
        with pytest.raises(UsageError, match="PostgresStore is bound"):
            saver.get_tuple(CONFIG)

        async def stored() -> list[Any]:
            fresh = await create_pool(name)
            try:
                return await PostgresStore(fresh).messages("langgraph:t")
            finally:
                await fresh.close()

        assert loop.run(stored()) == []
    finally:
        loop.run(stack.aclose())
        loop.close()


async def test_on_a_loops_own_thread_a_store_bound_to_no_loop_works() -> None:
    """As in a notebook: invoke on the loop's thread runs on the saver's own loop."""
    saver = SteerableSaver(MemoryStore())
    graph = echo_graph(saver)
    graph.invoke({"messages": [HumanMessage("one")]}, CONFIG)
    state = await graph.aget_state(CONFIG)
    assert _texts(state.values) == ["one", "echo one"]


async def test_on_a_loops_own_thread_a_bound_store_is_a_usage_error(tmp_path: Path) -> None:
    """Postgres on this loop: a sync call here would block the loop the pool needs."""
    async with open_store("postgres", tmp_path) as store:
        saver = SteerableSaver(store)
        with pytest.raises(UsageError, match="this thread runs an event loop"):
            saver.get_tuple(CONFIG)
        # from another thread it runs on this loop
        assert await asyncio.to_thread(saver.get_tuple, CONFIG) is None


def test_one_saver_on_two_loops_in_turn_each_with_writers_in_contention(tmp_path: Path) -> None:
    """Each loop keeps locks and logs of its own: a lock a loop waited on is not reused."""
    store = SQLiteStore(tmp_path / "loops.db")  # its saves yield: the writers do wait
    saver = SteerableSaver(store)
    stored = asyncio.run(_one_checkpoint(saver))

    async def writers(task: str) -> None:
        writes = [saver.aput_writes(stored, [("out", n)], f"{task}{n}") for n in range(4)]
        await asyncio.gather(*writes)  # they wait on the thread's lock in turn

    asyncio.run(writers("first"))
    asyncio.run(writers("second"))
    latest = saver.get_tuple(_config("t"))
    assert latest is not None and len(latest.pending_writes or []) == 8
    asyncio.run(store.close())


async def _one_checkpoint(saver: SteerableSaver) -> RunnableConfig:
    return await saver.aput(_config("t"), empty_checkpoint(), {"step": 0}, {})


async def _chain(saver: SteerableSaver, thread: str, steps: int) -> None:
    version: str | None = None
    for step in range(steps):
        version = saver.get_next_version(version, None)
        checkpoint = empty_checkpoint()
        checkpoint["id"] = str(uuid6(clock_seq=step))
        checkpoint["channel_values"] = {"messages": [HumanMessage(f"m{step}", id=f"m{step}")]}
        checkpoint["channel_versions"] = {"messages": version}
        await saver.aput(_config(thread), checkpoint, {"step": step}, {"messages": version})


async def test_sync_prune_and_copy_thread_work_from_another_thread() -> None:
    saver = SteerableSaver(MemoryStore())
    await _chain(saver, "a", 3)
    await asyncio.to_thread(saver.copy_thread, "a", "b")
    await asyncio.to_thread(saver.prune, ["a"])
    kept = [t.metadata["step"] async for t in saver.alist(_config("a"))]
    copied = [t.metadata["step"] async for t in saver.alist(_config("b"))]
    assert kept == [2] and copied == [2, 1, 0]


async def test_delete_for_runs_is_langgraph_s_absent_method() -> None:
    saver = SteerableSaver(MemoryStore())
    with pytest.raises(NotImplementedError):
        await saver.adelete_for_runs(["run"])
    with pytest.raises(NotImplementedError):
        await asyncio.to_thread(saver.delete_for_runs, ["run"])
