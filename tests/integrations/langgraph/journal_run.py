"""A LangGraph run calling a journaled tool in a process of its own; it may SIGKILL itself.

    python -m tests.integrations.langgraph.journal_run URL MODE POINT ROLE IDEMPOTENT LEDGER \
        REQUESTS

runs a ``create_agent`` whose model (:class:`PayChat`, requests appended to REQUESTS) calls
``pay`` once, with a fresh random call id as a provider would, then answers with the tool's
result. ``pay`` is ``@tool @journaled`` over a sync function (so it runs in a worker
thread, the journal's context copied there): its effect is a line in LEDGER (the call's key,
whether it is a retry, the call id), fsynced. The store is URL's, the session ``"s"``. MODE
is the integration's entry point and its resume path:

- ``agent``: :class:`LangGraphAgent.run_turn` over a turn; resumed as a takeover is, from
  the stored transcript (``resumed=True``);
- ``middleware``: ``create_agent`` with ``SteeringMiddleware(session)`` and no checkpointer;
  resumed by running the same prompt again;
- ``saver``: ``create_agent`` checkpointed by a :class:`SteerableSaver` on the store (no
  middleware of ours, ``durability="sync"``); resumed with ``ainvoke(None)``.

ROLE ``first`` starts the turn and dies at POINT: ``in-tool`` (inside ``pay``, after its
effect) or ``after-end`` (the call's result recorded, before the graph got it). ``resume``
carries the turn on in a fresh process and prints ``{"text": ..., "reply": ...}`` as one
JSON line (``reply``: the id of the reply that called ``pay``, in the graph's last state; None
for ``agent``, whose turn gives only its outcome).
Used by test_journaled.py; not a test module.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import InputAgentState
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from steerable.integrations.langgraph import (
    LangGraphAgent,
    SteerableSaver,
    SteeringMiddleware,
    journaled,
)
from steerable.journal import ToolContext
from steerable.messages import Message, Text
from steerable.service.agent import Turn
from steerable.service_store import Input
from steerable.session import Session
from steerable.stores.url import open_url

SESSION = "s"


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class PayChat(BaseChatModel):
    """Calls ``pay`` (a new random call id each time it is asked), then answers with the
    last tool result: ``"done: <result>"``. Each request is a JSON line of ``record_to``."""

    record_to: str

    @property
    def _llm_type(self) -> str:
        return "pay-chat"

    def bind_tools(self, tools: Any, **kwargs: Any) -> PayChat:
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        raise NotImplementedError("PayChat is async")

    async def _agenerate(
        self, messages: list[BaseMessage], *args: Any, **kwargs: Any
    ) -> ChatResult:
        self._record(messages)
        results = [m for m in messages if isinstance(m, ToolMessage)]
        if results:
            reply = AIMessage(f"done: {results[-1].text}")
        else:
            call = {"name": "pay", "args": {"amount": 5}, "id": f"call-{uuid.uuid4().hex[:12]}"}
            reply = AIMessage("", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=reply)])

    def _record(self, messages: list[BaseMessage]) -> None:
        with open(self.record_to, "a", encoding="utf-8") as out:
            out.write(json.dumps([_view(m) for m in messages]) + "\n")


def _view(message: BaseMessage) -> dict[str, Any]:
    view: dict[str, Any] = {"type": message.type, "id": message.id, "text": message.text}
    if isinstance(message, AIMessage):
        view["calls"] = [c["id"] for c in message.tool_calls]
    if isinstance(message, ToolMessage):
        view["answers"], view["status"] = message.tool_call_id, message.status
    return view


class DieAfterTheTool(AgentMiddleware[Any, Any, Any]):
    """Outermost around each tool call: dies once the call returned (its result recorded)."""

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        result = await handler(request)
        die()
        return result


def pay_tool(ledger: str, *, idempotent: bool, dying: bool) -> Any:
    @tool
    @journaled(idempotent=idempotent)
    def pay(amount: int, context: ToolContext) -> str:
        """Pay ``amount``."""
        with open(ledger, "a", encoding="utf-8") as out:
            out.write(f"{context.key} {context.retried} {context.call.id}\n")
            out.flush()
            os.fsync(out.fileno())
        if dying:
            die()
        return f"paid {amount}"

    return pay


async def run(
    url: str, mode: str, point: str, role: str, idempotent: bool, files: Sequence[str]
) -> tuple[str, str | None]:
    ledger, requests = files
    first = role == "first"
    pay = pay_tool(ledger, idempotent=idempotent, dying=first and point == "in-tool")
    middleware: list[AgentMiddleware[Any, Any, Any]] = []
    if first and point == "after-end":
        middleware.append(DieAfterTheTool())
    model = PayChat(record_to=requests)
    async with open_url(url) as store:
        session = Session(SESSION, store)
        if mode == "agent":
            stored = await session.messages()
            messages = stored if stored else [Message("user", (Text("pay"),), id="p")]
            turn = Turn(
                session=SESSION,
                id="p",
                prompt=Input("send", "pay", id="p"),
                messages=messages,
                store_session=session,
                resumed=not first,
                steers_left=4,
            )
            outcome = await LangGraphAgent(model, [pay], middleware=middleware).run_turn(turn)
            return outcome.text, None
        config: RunnableConfig = {"configurable": {"thread_id": SESSION}}
        prompt: InputAgentState = {"messages": [HumanMessage("pay", id="p")]}
        if mode == "middleware":
            graph = create_agent(
                model, [pay], middleware=[*middleware, SteeringMiddleware(session)]
            )
            state = await graph.ainvoke(prompt, config)  # a retry: the same prompt again
        else:
            saver = SteerableSaver(store)
            graph = create_agent(model, [pay], middleware=middleware, checkpointer=saver)
            state = await graph.ainvoke(prompt if first else None, config, durability="sync")
        text: str = state["messages"][-1].text
        reply = next(m.id for m in state["messages"] if isinstance(m, AIMessage) and m.tool_calls)
        return text, reply


def main() -> None:
    url, mode, point, role, idempotent, ledger, requests = sys.argv[1:8]
    text, reply = asyncio.run(run(url, mode, point, role, idempotent == "yes", (ledger, requests)))
    print(json.dumps({"text": text, "reply": reply}))


if __name__ == "__main__":
    main()
