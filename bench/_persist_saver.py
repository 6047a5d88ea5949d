"""steerable's LangGraph checkpointer in ``bench.persist``, and what its reads cost.

``bench.persist`` measures :class:`~steerable.integrations.langgraph._saver.SteerableSaver`
as "steerable saver", under the same ReAct graph as LangGraph's own savers (its
``LangGraph`` system), on a steerable store of the same backend: :func:`steerable_saver`
builds it.

The write per step is what the saver is for; its reads cost more, so they are measured
here too: ``python -m bench._persist_saver`` stores a thread of N messages through the
graph on SQLite, with this saver and with ``AsyncSqliteSaver``, then times ``aget_tuple``
of the latest checkpoint: cold (a new saver, which loads and folds the thread's whole log)
and warm (the saver that wrote it: one empty save checks its copy is current).
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
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


async def reads(sizes: Sequence[int], reps: int) -> None:
    """Print ``aget_tuple`` of the latest checkpoint, µs, per saver and size (SQLite)."""
    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    from steerable.integrations.langgraph._saver import SteerableSaver
    from steerable.stores.sqlite import SQLiteStore

    print("| messages | AsyncSqliteSaver | steerable saver, warm | steerable saver, cold |")
    print("|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="bench-saver-") as root:
        async with SQLiteStore(Path(root) / "saver.db") as store:
            conn = await aiosqlite.connect(Path(root) / "langgraph.db")
            try:
                theirs = AsyncSqliteSaver(conn)
                ours = SteerableSaver(store)
                for messages in sizes:
                    their_config = await _thread(theirs, messages)
                    our_config = await _thread(ours, messages)
                    row = [
                        await _timed(lambda: theirs, their_config, reps),
                        await _timed(lambda: ours, our_config, reps),
                        await _timed(lambda: SteerableSaver(store), our_config, reps),
                    ]
                    print(f"| {messages:,} | " + " | ".join(f"{t * 1e6:,.0f}" for t in row) + " |")
            finally:
                await conn.close()


if __name__ == "__main__":
    asyncio.run(reads([10, 100, 1000], 20))
