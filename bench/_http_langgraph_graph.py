"""The scripted agent for LangGraph's Agent Server (``langgraph dev``), loaded by that server.

The same agent as steerable's keyless demo: the model (a fake chat model) calls one tool,
``work``, which sleeps ``BENCH_HTTP_TOOL`` seconds, then answers with every human message
since its last answer. Each model request is appended to the JSON-lines file
``BENCH_HTTP_LOG`` (its time, thread and the human texts it carries): that is how the bench
sees when a request happened and which messages it carried. Self-contained: the server
imports it by path, with no ``bench`` package on its path.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, MessagesState, StateGraph

TOOL = float(os.environ.get("BENCH_HTTP_TOOL", "0.3"))
LOG = os.environ.get("BENCH_HTTP_LOG", "")


def _since_answer(messages: list[AnyMessage]) -> list[AnyMessage]:
    """The messages after the model's last answer (an AI message without tool calls)."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, AIMessage) and not message.tool_calls:
            return messages[index + 1 :]
    return messages


def _log(line: str) -> None:
    # One short append per request: the bench's clock for "the model was asked".
    with open(LOG, "a", encoding="utf-8") as out:
        out.write(line + "\n")


async def model(state: MessagesState, config: RunnableConfig) -> dict[str, list[AnyMessage]]:
    """The fake chat model: a ``work`` call until one was made this turn, then the answer."""
    mine = _since_answer(state["messages"])
    heard = [str(m.content) for m in mine if isinstance(m, HumanMessage)]
    if LOG:
        thread = config.get("configurable", {}).get("thread_id")
        line = json.dumps({"at": time.time(), "thread": str(thread), "heard": heard})
        _log(line)
    if not any(isinstance(m, ToolMessage) for m in mine):
        call = {"id": f"call_{uuid.uuid4().hex[:12]}", "name": "work", "args": {"step": 1}}
        return {"messages": [AIMessage("", tool_calls=[call])]}
    return {"messages": [AIMessage("answered: " + " | ".join(heard))]}


async def tools(state: MessagesState) -> dict[str, list[AnyMessage]]:
    """The ``work`` tool: sleeps, then says it is done, for every call of the last message."""
    last = state["messages"][-1]
    calls = last.tool_calls if isinstance(last, AIMessage) else []
    await asyncio.sleep(TOOL)
    return {
        "messages": [
            ToolMessage("step 1 done", tool_call_id=c["id"], name=c["name"]) for c in calls
        ]
    }


def _route(state: MessagesState) -> str:
    last = state["messages"][-1]
    return "tools" if isinstance(last, AIMessage) and last.tool_calls else END


def _build() -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("model", model)
    builder.add_node("tools", tools)
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", _route, ["tools", END])
    builder.add_edge("tools", "model")
    return builder.compile()


graph = _build()
