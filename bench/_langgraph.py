"""LangGraph's side of the benchmarks: a ReAct graph with a scripted model node.

The graph is what ``create_react_agent`` builds, minus the chat model: ``agent`` returns
the next scripted ``AIMessage`` (a tool call, or the final answer), ``tools`` answers every
call of the last message with a ``ToolMessage``, and the ``messages`` channel is LangGraph's
standard ``add_messages`` reducer. The checkpointer is LangGraph's own, so what is stored at
each step is exactly what LangGraph stores for any graph of this shape.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langgraph.graph import END, START, MessagesState, StateGraph

from bench._common import written


class ReActGraph:
    """A compiled ReAct graph whose model replies come from :attr:`script`.

    ``answer(call)`` gives the tool's output for a tool call (a LangChain tool-call dict).
    With ``marks`` (``bench.persist``), before each model reply the graph records a mark
    ``(time, bytes written, payload)`` in :attr:`marks`: the steps of a run are the spans
    between marks. ``bench.loop_overhead`` goes without: reading ``/proc`` at every step
    is the benchmark's cost, not LangGraph's.
    """

    def __init__(
        self, checkpointer: Any, answer: Callable[[dict[str, Any]], str], *, marks: bool = True
    ) -> None:
        self.script: Iterator[AIMessage] = iter(())
        self.marks: list[tuple[float, int, int]] = []
        self.payload = 0  # bytes the checkpointer's serializer produced so far
        self._answer = answer
        builder = StateGraph(MessagesState)
        builder.add_node("agent", self._agent if marks else self._reply)
        builder.add_node("tools", self._tools)
        builder.add_edge(START, "agent")
        builder.add_conditional_edges("agent", _route, ["tools", END])
        builder.add_edge("tools", "agent")
        self.graph: Any = builder.compile(checkpointer=checkpointer)

    async def _agent(self, state: MessagesState) -> dict[str, list[AnyMessage]]:
        self.marks.append((time.perf_counter(), written(), self.payload))
        return {"messages": [next(self.script)]}

    async def _reply(self, state: MessagesState) -> dict[str, list[AnyMessage]]:
        return {"messages": [next(self.script)]}

    async def _tools(self, state: MessagesState) -> dict[str, list[AnyMessage]]:
        last = state["messages"][-1]
        calls = last.tool_calls if isinstance(last, AIMessage) else []
        return {
            "messages": [
                ToolMessage(self._answer(dict(c)), tool_call_id=c["id"], name=c["name"])
                for c in calls
            ]
        }

    async def run(self, messages: list[AnyMessage], thread: str | None, steps: int) -> Any:
        """Run the graph over ``messages`` (the input) for about ``steps`` steps.

        ``thread`` is the checkpointer's thread id (None without a checkpointer). Saves are
        awaited before the next step (``durability="sync"``), as steerable's are.
        """
        config: dict[str, Any] = {"recursion_limit": 2 * steps + 10}
        if thread is None:  # durability="sync" without a checkpointer fails in LangGraph 1.2
            return await self.graph.ainvoke({"messages": messages}, config=config)
        config["configurable"] = {"thread_id": thread}
        return await self.graph.ainvoke({"messages": messages}, config=config, durability="sync")

    def count_serialized(self, serde: Any) -> Any:
        """Make ``serde`` (a checkpointer's serializer) add its output sizes to ``payload``."""
        dumps: Callable[[Any], tuple[str, bytes]] = serde.dumps_typed

        def counted(value: Any) -> tuple[str, bytes]:
            kind, data = dumps(value)
            self.payload += len(data)
            return kind, data

        vars(serde)["dumps_typed"] = counted
        return serde


def timed_saver(saver: Any, spans: list[tuple[float, float]]) -> Any:
    """Record the wall-clock span of every write ``saver`` makes (``aput``, ``aput_writes``)."""
    for name in ("aput", "aput_writes"):
        method: Callable[..., Awaitable[Any]] = getattr(saver, name)
        vars(saver)[name] = _timed(method, spans)
    return saver


def _timed(
    method: Callable[..., Awaitable[Any]], spans: list[tuple[float, float]]
) -> Callable[..., Awaitable[Any]]:
    async def call(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return await method(*args, **kwargs)
        finally:
            spans.append((start, time.perf_counter()))

    return call


def covered(spans: list[tuple[float, float]], start: float, end: float) -> float:
    """Seconds of ``[start, end)`` covered by at least one span (overlaps counted once)."""
    total, reach = 0.0, start
    for a, b in sorted(spans):
        a, b = max(a, reach), min(b, end)
        if b > a:
            total += b - a
            reach = b
    return total


def _route(state: MessagesState) -> str:
    last = state["messages"][-1]
    return "tools" if isinstance(last, AIMessage) and last.tool_calls else END
