"""A ReAct-shaped LangGraph graph with a scripted model node, and a store that counts saves.

The graph is ``create_react_agent``'s shape over ``MessagesState`` (LangGraph's standard
``add_messages`` reducer): ``agent`` returns the next scripted ``AIMessage`` (a tool call
or the answer), ``tools`` answers each call with a ``ToolMessage``. ``CountingStore`` is a
real store with every save's record bytes noted on the way through.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langgraph.graph import END, START, MessagesState, StateGraph

from steerable.messages import Message, Native
from steerable.store import Steer, Store


def tool_call(n: int) -> AIMessage:
    """The model's n-th reply: one tool call with about 200 bytes of arguments."""
    call = {"name": "lookup", "args": {"q": f"{n} " * 60}, "id": f"c{n}"}
    return AIMessage("", tool_calls=[call])


def history(messages: int) -> list[AnyMessage]:
    """A prompt and earlier tool steps: about ``messages`` messages."""
    stored: list[AnyMessage] = [HumanMessage("the prompt")]
    for n in range(messages // 2):
        stored += [tool_call(n), ToolMessage("result " * 30, tool_call_id=f"c{n}", name="lookup")]
    return stored


def react_graph(checkpointer: Any, script: Iterator[AIMessage]) -> Any:
    """The compiled graph; its model node replies with ``script``'s messages in turn."""

    async def agent(state: MessagesState) -> dict[str, list[AnyMessage]]:
        return {"messages": [next(script)]}

    async def tools(state: MessagesState) -> dict[str, list[AnyMessage]]:
        last = state["messages"][-1]
        calls = last.tool_calls if isinstance(last, AIMessage) else []
        return {
            "messages": [
                ToolMessage("result " * 30, tool_call_id=c["id"], name=c["name"]) for c in calls
            ]
        }

    def route(state: MessagesState) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", tools)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=checkpointer)


@dataclass
class CountingStore:
    """``inner`` with the bytes of each save's Native records kept in :attr:`saves`."""

    inner: Store
    saves: list[int] = field(default_factory=list)

    async def messages(self, session: str) -> list[Message]:
        """The inner store's transcript."""
        return await self.inner.messages(session)

    async def save(
        self, session: str, messages: Sequence[Message], *, at: int, take: int = 0
    ) -> list[Message]:
        """The inner store's save, its Native data counted first (empty probes are not)."""
        if messages:
            parts = [p for m in messages for p in m.parts if isinstance(p, Native)]
            self.saves.append(sum(len(p.data.encode()) for p in parts))
        return await self.inner.save(session, messages, at=at, take=take)

    async def steer(self, session: str, steer: Steer) -> None:
        """The inner store's steer."""
        await self.inner.steer(session, steer)

    async def take_steers(self, session: str, *, at: int | None, limit: int) -> list[Message]:
        """The inner store's take."""
        return await self.inner.take_steers(session, at=at, limit=limit)

    async def steers(self, session: str) -> list[Steer]:
        """The inner store's waiting steers."""
        return await self.inner.steers(session)
