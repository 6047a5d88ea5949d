"""``journaled`` in one process: the key of a call, a replay, a retry, the tool's schema.

A journaled tool is called as LangGraph's ``ToolNode`` calls it (a model's ToolCall), in a
:func:`journal_session` over a :class:`MemoryStore`; with no session it just runs. In a
graph, :class:`SteeringMiddleware` stores a reply with journaled calls before they run,
once for all of them, and a reply with plain calls only after them, as before.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import InjectedToolCallId, tool
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command

from steerable.errors import UsageError
from steerable.integrations._journal import journal_session
from steerable.integrations.langgraph import SteeringMiddleware, journaled
from steerable.integrations.langgraph._journaled import _CHECKPOINTER
from steerable.journal import UNKNOWN, ToolContext, call_key
from steerable.session import Session
from steerable.stores.memory import MemoryStore
from tests.integrations.langgraph.chat import ScriptedChat
from tests.integrations.langgraph.support import shape


def _call(id: str, name: str = "pay", **args: Any) -> dict[str, Any]:
    return {"type": "tool_call", "id": id, "name": name, "args": args or {"amount": 5}}


def _paying(seen: list[ToolContext], *, idempotent: bool = False, fail: int = 0) -> Any:
    failures = {"left": fail}

    @tool
    @journaled(idempotent=idempotent)
    async def pay(amount: int, context: ToolContext) -> str:
        """Pay ``amount``."""
        seen.append(context)
        if failures["left"]:
            failures["left"] -= 1
            raise RuntimeError("the process stopped here")
        return f"paid {amount} #{len(seen)}"

    return pay


async def test_a_call_runs_once_per_session_and_its_key_is_stable_and_distinct() -> None:
    store, seen = MemoryStore(), list[ToolContext]()
    pay = _paying(seen)
    one, two = Session("one", store), Session("two", store)
    with journal_session(one):
        first = await pay.ainvoke(_call("c1"))
        again = await pay.ainvoke(_call("c1"))  # a retry of the call: replayed
        other = await pay.ainvoke(_call("c2"))
    with journal_session(two):
        elsewhere = await pay.ainvoke(_call("c1"))
    assert [first.content, again.content] == ["paid 5 #1"] * 2
    assert (other.content, elsewhere.content) == ("paid 5 #2", "paid 5 #3")
    keys = [c.key for c in seen]
    assert len(set(keys)) == 3 and all(len(k) == 32 for k in keys)
    assert [(c.session, c.call.id, c.retried) for c in seen] == [
        ("one", "c1", False),
        ("one", "c2", False),
        ("two", "c1", False),
    ]
    assert json.loads(seen[0].call.arguments) == {"amount": 5} and seen[0].call.name == "pay"


async def test_an_interrupted_call_is_unknown_or_retried_under_its_key_if_idempotent() -> None:
    store = MemoryStore()
    for idempotent in (False, True):
        seen: list[ToolContext] = []
        pay = _paying(seen, idempotent=idempotent, fail=1)
        with journal_session(Session(f"s{idempotent}", store)):
            with pytest.raises(RuntimeError):
                await pay.ainvoke(_call("c1"))  # started, never ended
            retried = await pay.ainvoke(_call("c1"))
            later = await pay.ainvoke(_call("c1"))
        if idempotent:
            assert retried.content == later.content == "paid 5 #2"
            assert [(c.key, c.retried) for c in seen] == [(seen[0].key, False), (seen[0].key, True)]
        else:
            assert retried.content == later.content == UNKNOWN and len(seen) == 1
            assert retried.status == "error"


async def test_with_no_session_the_tool_just_runs() -> None:
    seen: list[ToolContext] = []
    pay = _paying(seen)
    first, second = await pay.ainvoke(_call("c1")), await pay.ainvoke(_call("c1"))
    assert (first.content, second.content) == ("paid 5 #1", "paid 5 #2")
    assert [c.session for c in seen] == [None, None]
    assert await pay.coroutine(amount=3) == "paid 3 #3"  # called as a function: no call id


async def test_the_tool_has_the_schema_and_description_of_its_function() -> None:
    def look(query: str, limit: int = 3) -> dict[str, Any]:
        """Look ``query`` up."""
        return {"query": query, "limit": limit}

    async def own(query: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
        """Answer with the call id."""
        return tool_call_id

    plain, wrapped = tool(look), tool(journaled(idempotent=True)(look))
    assert wrapped.name == plain.name and wrapped.description == plain.description
    schema = plain.tool_call_schema.model_json_schema()  # type: ignore[union-attr]
    assert wrapped.tool_call_schema.model_json_schema() == schema  # type: ignore[union-attr]
    # a function with an InjectedToolCallId of its own keeps it, and gets the call's id
    with journal_session(Session("s", MemoryStore())):
        answered = await tool(journaled(own)).ainvoke(_call("c9", "own", query="q"))
        # a value that is not text: recorded as langchain writes it (JSON), replayed as that
        looked = await wrapped.ainvoke(_call("c1", "look", query="q"))
        again = await wrapped.ainvoke(_call("c1", "look", query="q"))
    assert answered.content == "c9"
    expected = await plain.ainvoke(_call("c1", "look", query="q"))
    assert looked.content == again.content == expected.content == '{"query": "q", "limit": 3}'


async def test_what_cannot_be_journaled_is_refused() -> None:
    @tool
    def plain(x: int) -> str:
        """Plain."""
        return ""

    with pytest.raises(UsageError, match="under @tool"):
        journaled(plain)  # type: ignore[call-overload]

    @tool
    @journaled
    async def command(x: int) -> Any:
        """Returns a Command."""
        return Command(update={})

    with journal_session(Session("s", MemoryStore())), pytest.raises(UsageError, match="Command"):
        await command.ainvoke(_call("c1", "command", x=1))


def test_the_config_key_of_the_checkpointer_is_langgraphs() -> None:
    from langgraph._internal._constants import CONFIG_KEY_CHECKPOINTER

    assert _CHECKPOINTER == CONFIG_KEY_CHECKPOINTER


class _TwoCalls(ScriptedChat):
    """Calls ``name`` twice in one reply, then answers."""

    name_: str

    async def _reply(self, messages: list[BaseMessage]) -> AIMessage:
        if any(isinstance(m, ToolMessage) for m in messages):
            return AIMessage("done")
        return AIMessage("", tool_calls=[_call(f"c{i}", self.name_) for i in (1, 2)])


@pytest.mark.parametrize("journal", [True, False])
async def test_a_reply_is_stored_before_its_journaled_calls_run_once_for_all(
    journal: bool,
) -> None:
    session = Session("s", MemoryStore())
    during: list[list[str]] = []

    async def pay(amount: int) -> str:
        """Pay ``amount``."""
        during.append(shape(await Session("s", session.store).messages()))
        return "paid"

    agent = create_agent(
        _TwoCalls(name_="pay"),
        [journaled(pay) if journal else pay],
        middleware=[SteeringMiddleware(session)],
    )
    await agent.ainvoke({"messages": [{"role": "user", "content": "pay"}]})
    # a plain tool's reply is stored at the next step, with its results, as before
    assert during == ([["user:pay", "ai"]] * 2 if journal else [["user:pay"]] * 2)
    assert shape(await session.messages()) == ["user:pay", "ai", "tool", "tool", "ai"]


class _CallZero(ScriptedChat):
    """Calls ``pay`` as ``call_0`` in each reply, as servers that number each reply's calls
    do, then answers with the tool's result."""

    async def _reply(self, messages: list[BaseMessage]) -> AIMessage:
        if isinstance(messages[-1], ToolMessage):
            return AIMessage(f"done: {messages[-1].text}")
        return AIMessage("", tool_calls=[_call("call_0")])


class _Died(Exception):
    """The process going away once the call's result was recorded."""


class _DieAfterTheTool(AgentMiddleware[Any, Any, Any]):
    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        await handler(request)
        raise _Died


async def test_replies_reusing_a_call_id_each_run_and_carry_on_under_their_own_key() -> None:
    store, seen = MemoryStore(), list[ToolContext]()
    pay, session = _paying(seen), Session("s", store)
    config: RunnableConfig = {"configurable": {"thread_id": "s"}}

    def agent(*middleware: AgentMiddleware[Any, Any, Any]) -> Any:  # a process's, no checkpointer
        return create_agent(_CallZero(), [pay], middleware=[*middleware, SteeringMiddleware(store)])

    first = await agent().ainvoke({"messages": [{"role": "user", "content": "pay"}]}, config)
    again = {"messages": [{"role": "user", "content": "pay again"}]}
    with pytest.raises(_Died):  # the second turn's call_0 ran and was recorded, then it died
        await agent(_DieAfterTheTool()).ainvoke(again, config)
    retried = await agent().ainvoke(again, config)  # the same prompt again: carried on

    assert first["messages"][-1].text == "done: paid 5 #1"
    # the carried-on turn got ITS call's recorded result, not the first turn's
    assert retried["messages"][-1].text == "done: paid 5 #2"
    stored = await session.messages()
    assert shape(stored) == ["user:pay", "ai", "tool", "ai", "user:pay again", "ai", "tool", "ai"]
    replies = [stored[1].id, stored[5].id]
    # each call is keyed by its stored reply's id (the same on the carried-on run)
    assert [c.key for c in seen] == [call_key("s", f"langgraph/{r}", "call_0") for r in replies]
    assert [(c.call.id, c.retried) for c in seen] == [("call_0", False)] * 2
