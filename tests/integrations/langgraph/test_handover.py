"""A session steerable's own ReAct loop wrote to, carried on by LangGraph.

steerable's loop stores a turn's tool results as one user message of
:class:`~steerable.messages.ToolResult` parts; LangGraph rebuilds each as a ToolMessage of
its own id. Whatever ids the rebuilt messages carry, the middleware and the agent must know
them as stored: nothing stored twice, no prompt lost, a transcript a provider accepts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware.types import InputAgentState
from langchain_core.messages import HumanMessage
from langgraph.graph import START, MessagesState, StateGraph

from steerable import Runner, Spec
from steerable.integrations.langgraph import LangGraphAgent, SteeringMiddleware, from_stored
from steerable.messages import Message
from steerable.models.scripted import ScriptedModel, ScriptEntry, call
from steerable.service import Service
from steerable.session import Session
from steerable.stores.sqlite import SQLiteStore
from steerable.tools import tool
from tests.integrations.langgraph.chat import ScriptedChat, valid
from tests.integrations.langgraph.support import shape, work_tool


async def _work() -> str:
    """Do work."""
    return "worked"


async def _react(session: Session, *, answer: bool = True) -> list[Message]:
    """One turn of steerable's own ReAct loop on ``session``: a tool call, its result and
    (with ``answer``) a final answer; without it the run stops after the result."""
    script: list[ScriptEntry] = [call("_work", id="c1"), "done"]
    spec = Spec(tools=[tool(_work)], session=session, max_steps=2 if answer else 1)
    await Runner.run(spec, "first", ScriptedModel(script if answer else script[:1]))
    return await session.messages()


def _second() -> HumanMessage:
    return HumanMessage("second", id="p2")


def _ours(stored: list[Message]) -> list[str]:
    return [m.id for m in stored]


async def test_a_middleware_run_after_a_react_turn_stores_each_message_once(
    tmp_path: Path,
) -> None:
    async with SQLiteStore(tmp_path / "s.db") as store:
        session = Session("s", store)
        before = await _react(session)
        agent = create_agent(
            ScriptedChat(rounds=1), [work_tool()], middleware=[SteeringMiddleware(session)]
        )
        history: InputAgentState = {"messages": [*from_stored(before), _second()]}
        await agent.ainvoke(history)
        stored = await session.messages()
    assert _ours(stored)[: len(before)] == _ours(before)
    assert shape(stored)[len(before) :] == ["user:second", "ai", "tool", "ai"]
    assert valid(from_stored(stored))


async def test_a_prompt_after_a_transcript_ending_with_a_react_result_is_stored(
    tmp_path: Path,
) -> None:
    async with SQLiteStore(tmp_path / "s.db") as store:
        session = Session("s", store)
        before = await _react(session, answer=False)
        assert before[-1].tool_results  # it ends with steerable's own result message
        model = ScriptedChat(rounds=0)
        agent = create_agent(model, [work_tool()], middleware=[SteeringMiddleware(session)])
        history: InputAgentState = {"messages": [*from_stored(before), _second()]}
        await agent.ainvoke(history)
        stored = await session.messages()
    assert model.requests[0][-1].id == "p2"
    assert _ours(stored) == [*_ours(before), "p2", _ours(stored)[-1]]
    assert shape(stored)[-2:] == ["user:second", "ai"]


async def test_a_service_turn_after_a_react_turn_stores_each_message_once(
    tmp_path: Path,
) -> None:
    async with SQLiteStore(tmp_path / "s.db") as store:
        before = await _react(Session("s", store))
        service = Service(store, LangGraphAgent(ScriptedChat(rounds=1), [work_tool()]), poll=0.05)
        async with service.serving():
            await service.send("s", "second", id="p2")
            done = await service.wait("s", "p2", seconds=30)
            stored = [e.message for e in await service.transcript("s", limit=1000)]
    assert done is not None and done.state == "completed", done
    assert _ours(stored)[: len(before)] == _ours(before)
    assert shape(stored)[len(before) :] == ["user:second", "ai", "tool", "ai"]
    assert valid(from_stored(stored))


def _answering_graph(model: ScriptedChat) -> Any:
    async def answer(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("answer", answer)
    graph.add_edge(START, "answer")
    return graph.compile()


async def test_a_graph_agent_turn_after_a_react_turn_stores_each_message_once(
    tmp_path: Path,
) -> None:
    async with SQLiteStore(tmp_path / "s.db") as store:
        before = await _react(Session("s", store))
        agent = LangGraphAgent(graph=_answering_graph(ScriptedChat(rounds=0)))
        service = Service(store, agent, poll=0.05)
        async with service.serving():
            await service.send("s", "second", id="p2")
            done = await service.wait("s", "p2", seconds=30)
            stored = [e.message for e in await service.transcript("s", limit=1000)]
    assert done is not None and done.state == "completed", done
    assert _ours(stored)[: len(before)] == _ours(before)
    assert shape(stored)[len(before) :] == ["user:second", "ai"]
    assert valid(from_stored(stored))
