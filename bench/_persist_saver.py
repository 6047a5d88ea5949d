"""steerable's LangGraph checkpointer in ``bench.persist``, and what its reads cost.

``bench.persist`` measures :class:`~steerable.integrations.langgraph._saver.SteerableSaver`
as "steerable saver", under the same ReAct graph as LangGraph's own savers (its
``LangGraph`` system), on a steerable store of the same backend: :func:`steerable_saver`
builds it.

The write per step is what the saver is for; its reads cost more, so they are measured
here too: ``python -m bench._persist_saver`` stores a thread of N messages through the
graph with this saver and with LangGraph's (``AsyncSqliteSaver`` on SQLite,
``AsyncPostgresSaver`` on Postgres), then times ``aget_tuple`` of the latest checkpoint:
cold (a new saver, which loads and folds the thread's whole log) and warm (the saver that
wrote it: one empty save checks its copy is current). The last column is cold / theirs.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

SAVER = "steerable saver"


async def steerable_saver(
    stack: contextlib.AsyncExitStack, store: Any, system: Callable[[Any, str], Any], serde: Any
) -> Any:
    """``system(saver, SAVER)`` over ``store`` (entered on ``stack`` if it is a context)."""
    from steerable.integrations.langgraph._saver import SteerableSaver

    if isinstance(store, contextlib.AbstractAsyncContextManager):
        store = await stack.enter_async_context(store)
    return system(SteerableSaver(store, serde=serde), SAVER)


async def _thread(saver: Any, messages: int) -> Any:
    """A thread of about ``messages`` messages stored by the ReAct graph; its config."""
    from bench._common import Payloads
    from bench.persist import LangGraph, conversation

    system = LangGraph(saver)
    chat = conversation(messages, 3, Payloads())
    thread = uuid.uuid4().hex
    system.graph.script = iter([*(_call(t) for t in chat.steps), _done()])
    system._results = {t.call_id: t.result for t in chat.steps}
    from langchain_core.messages import HumanMessage, ToolMessage

    stored: list[Any] = [HumanMessage(chat.prompt)]
    for turn in chat.stored:
        stored += [_call(turn), ToolMessage(turn.result, tool_call_id=turn.call_id)]
    await system.graph.run(stored, thread, len(chat.steps))
    return {"configurable": {"thread_id": thread}}


def _call(turn: Any) -> Any:
    import json

    from langchain_core.messages import AIMessage

    args = json.loads(turn.arguments)
    return AIMessage("", tool_calls=[{"name": "lookup", "args": args, "id": turn.call_id}])


def _done() -> Any:
    from langchain_core.messages import AIMessage

    return AIMessage("done")


async def _timed(saver: Callable[[], Any], config: Any, reps: int) -> float:
    """The median time of ``saver().aget_tuple(config)`` (``saver()`` made before the clock)."""
    times = []
    for _ in range(reps):
        reader = saver()
        start = time.perf_counter()
        assert await reader.aget_tuple(config) is not None
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _same(saver: Any) -> Callable[[], Any]:
    """A maker that gives ``saver`` itself: the warm read."""
    return lambda: saver


@contextlib.asynccontextmanager
async def _sqlite() -> AsyncIterator[tuple[Any, Any]]:
    """``(AsyncSqliteSaver, a steerable SQLite store)``, each on a file of its own."""
    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    from steerable.stores.sqlite import SQLiteStore

    with tempfile.TemporaryDirectory(prefix="bench-saver-") as root:
        async with SQLiteStore(Path(root) / "saver.db") as store:
            conn = await aiosqlite.connect(Path(root) / "langgraph.db")
            try:
                yield AsyncSqliteSaver(conn), store
            finally:
                await conn.close()


@contextlib.asynccontextmanager
async def _postgres() -> AsyncIterator[tuple[Any, Any]]:
    """``(AsyncPostgresSaver, a steerable Postgres store)`` on one fresh database."""
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from psycopg import AsyncConnection
    from psycopg.rows import dict_row

    from bench._servers import postgres_database, postgres_pool, steerable_postgres

    async with postgres_database("saver-reads") as db:
        pool = await postgres_pool(db, 2)
        conninfo = f"host={db.host} port={db.port} user={db.user} dbname={db.name}"
        conn = await AsyncConnection.connect(
            conninfo, autocommit=True, prepare_threshold=0, row_factory=dict_row
        )
        try:
            theirs = AsyncPostgresSaver(conn)
            await theirs.setup()
            yield theirs, await steerable_postgres(pool)
        finally:
            await conn.close()
            await pool.close()


async def reads(sizes: Sequence[int], reps: int) -> None:
    """Print ``aget_tuple`` of the latest checkpoint, µs, per saver and size, per backend."""
    from steerable.integrations.langgraph._saver import SteerableSaver

    for name, backend in (("SQLite", _sqlite), ("Postgres", _postgres)):
        print(f"\n{name}\n")
        print("| messages | LangGraph's saver | ours, warm | ours, cold | cold / theirs |")
        print("|---:|---:|---:|---:|---:|")
        async with backend() as (theirs, store):
            ours = SteerableSaver(store)
            for messages in sizes:
                their_config = await _thread(theirs, messages)
                our_config = await _thread(ours, messages)
                row = [
                    await _timed(_same(theirs), their_config, reps),
                    await _timed(_same(ours), our_config, reps),
                    await _timed(lambda: SteerableSaver(store), our_config, reps),
                ]
                cells = " | ".join(f"{t * 1e6:,.0f}" for t in row)
                print(f"| {messages:,} | {cells} | {row[2] / row[0]:.1f}x |")


if __name__ == "__main__":
    asyncio.run(reads([10, 100, 1000], 50))
