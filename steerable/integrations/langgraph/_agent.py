"""A LangGraph agent the service runs: one ``create_agent``, steered at its own step.

The agent builds ``create_agent(model, tools, ...)`` once, with a :class:`SteeringMiddleware`
that serves every session, and runs each turn over the turn's messages rebuilt as langchain
messages; the turn's fenced session (and its steer cap) rides in the run's config, and the
thread is the session. The stored transcript is the turn's truth, so no checkpointer is
needed here: a takeover carries the turn on from ``turn.messages`` (what the last holder
stored at its last step), and the steers it took are in it, never taken again.

A compiled graph of your own (``graph=``) has no step this integration owns: it takes no
steer (``steers_per_turn`` 0, so each steer is a turn of its own), and its messages are
stored once the run ends.

When the turn has a live sink (``turn.events``), a :class:`TextDeltas` callback handler
rides in the run's config and sends the model's text as it arrives, and the middleware
sends each tool call's ToolStarted and ToolEnded through it (a ``graph=`` agent's tools
send none: no hook of ours wraps them); the run is the same ``ainvoke`` either way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import InputAgentState
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.errors import GraphRecursionError
from langgraph.graph.state import CompiledStateGraph

from steerable.errors import UsageError
from steerable.integrations._journal import journal_session
from steerable.integrations._steps import Steps, until_stopped
from steerable.integrations.langgraph._deltas import TextDeltas
from steerable.integrations.langgraph._middleware import (
    RUN_SESSION,
    RunSession,
    SteeringMiddleware,
)
from steerable.integrations.langgraph._records import (
    from_stored,
    stored_ids,
    to_stored,
    unanswered_tail,
)
from steerable.service.agent import Turn
from steerable.service_store import Outcome
from steerable.store import check_count

__all__ = ["LangGraphAgent"]

# The key ainvoke's output holds a paused run's interrupts under (langgraph.constants has it
# as a deprecated, private name since LangGraph 1.0).
_INTERRUPT = "__interrupt__"


class LangGraphAgent:
    """Runs each turn with ``create_agent(model, tools, ...)``, or with ``graph``.

    ``model``, ``tools``, ``system_prompt`` and ``middleware`` go to ``create_agent`` (our
    :class:`SteeringMiddleware` comes after ``middleware``, so it sees what their hooks
    added). ``recursion_limit`` bounds a turn's graph steps (a turn that reaches it ends
    ``max_steps``). ``graph`` instead: a compiled graph over a ``messages`` state, which
    takes no steer.
    """

    def __init__(
        self,
        model: BaseChatModel | str | None = None,
        tools: Sequence[BaseTool | Any] = (),
        *,
        system_prompt: str | None = None,
        middleware: Sequence[AgentMiddleware[Any, Any, Any]] = (),
        recursion_limit: int | None = None,
        steers_per_turn: int = 16,
        graph: CompiledStateGraph[Any, Any, Any, Any] | None = None,
    ) -> None:
        if (model is None) == (graph is None):
            raise UsageError("LangGraphAgent takes a model (for create_agent) or a graph=")
        if graph is not None and (tools or middleware or system_prompt is not None):
            raise UsageError("a graph= agent is built already: pass no tools or middleware")
        self.model = model
        self.tools = list(tools)
        self.system_prompt = system_prompt
        self.middleware = list(middleware)
        self.recursion_limit = (
            None if recursion_limit is None else check_count(recursion_limit, "recursion_limit")
        )
        self.graph = graph
        # a graph of its own has no step of ours to take a steer at
        self._steers = 0 if graph is not None else check_count(steers_per_turn, "steers")
        self._agent: CompiledStateGraph[Any, Any, Any, Any] | None = None  # built at first use

    def __repr__(self) -> str:
        what = "graph" if self.graph is not None else repr(self.model)
        return f"LangGraphAgent({what}, steers_per_turn={self._steers})"

    @property
    def steers_per_turn(self) -> int:
        """16 by default; 0 for a ``graph=`` agent (it has no step to take one at)."""
        return self._steers

    async def run_turn(self, turn: Turn) -> Outcome:
        """Run the turn's graph over its messages until it ends or the turn is stopped."""
        configurable: dict[str, Any] = {"thread_id": turn.session}
        config: RunnableConfig = {"configurable": configurable}
        if self.recursion_limit is not None:
            config["recursion_limit"] = self.recursion_limit
        live = None
        if turn.events is not None:
            live = TextDeltas(turn.events, session=turn.session, turn=turn.id)
            config["callbacks"] = [live]
        inputs: InputAgentState = {"messages": list(from_stored(turn.messages))}
        if self.graph is not None:
            return await self._run_graph(turn, self.graph, inputs, config)
        configurable[RUN_SESSION] = RunSession(turn.store_session, turn.steers_left, live)
        try:
            with journal_session(turn.store_session):  # the journal of journaled tools
                state, stopped = await until_stopped(turn, self.agent().ainvoke(inputs, config))
        except GraphRecursionError as exc:
            # the steps so far are stored; the reply under way when it stopped is not
            return Outcome("max_steps", error=f"GraphRecursionError: {exc}")
        if stopped or state is None:
            return Outcome("stopped")
        return _ended(state)

    def agent(self) -> CompiledStateGraph[Any, Any, Any, Any]:
        """The graph every turn runs: ``graph=``, or ``create_agent``'s (built on the first
        call), whose :class:`SteeringMiddleware` takes each run's session from its config."""
        if self.graph is not None:
            return self.graph
        if self._agent is None:
            self._agent = create_agent(
                self.model,  # type: ignore[arg-type]
                self.tools,
                system_prompt=self.system_prompt,
                middleware=[*self.middleware, SteeringMiddleware()],
            )
        return self._agent

    async def _run_graph(
        self,
        turn: Turn,
        graph: CompiledStateGraph[Any, Any, Any, Any],
        inputs: InputAgentState,
        config: RunnableConfig,
    ) -> Outcome:
        try:
            with journal_session(turn.store_session):
                state, stopped = await until_stopped(turn, graph.ainvoke(inputs, config))
        except GraphRecursionError as exc:
            return Outcome("max_steps", error=f"GraphRecursionError: {exc}")
        if stopped or state is None:
            return Outcome("stopped")
        messages: list[AnyMessage] = list(state["messages"])
        known = stored_ids(turn.messages)
        complete = messages[: len(messages) - unanswered_tail(messages)]
        new = [to_stored(m) for m in complete if m.id not in known]
        await Steps(turn.store_session, steers=0).save([*turn.messages, *new])
        return _ended(state)


def _ended(state: dict[str, Any]) -> Outcome:
    """The outcome of a graph run that returned ``state``.

    A run that paused at an ``interrupt()`` (langchain's ``HumanInTheLoopMiddleware``, or a
    node of your own) returns its state with ``"__interrupt__"``; nothing under the service
    can answer it (a turn has no human to ask, and no checkpoint to resume from), so the
    turn fails, saying so, rather than end "completed" with no answer.
    """
    interrupts = state.get(_INTERRUPT)
    if interrupts:
        asked = "; ".join(repr(getattr(i, "value", i)) for i in interrupts)
        return Outcome(
            "failed",
            error=(
                "the graph stopped at an interrupt (such as HumanInTheLoopMiddleware's),"
                f" which a turn under the service cannot answer: {asked}"
            ),
        )
    return Outcome("completed", _final_text(state["messages"]))


def _final_text(messages: Sequence[AnyMessage]) -> str:
    if messages and isinstance(messages[-1], AIMessage) and not messages[-1].tool_calls:
        return messages[-1].text
    return ""
