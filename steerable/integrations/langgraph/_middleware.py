"""Steers at LangGraph's own step: a ``create_agent`` middleware over a steerable session.

``create_agent`` runs ``before_model`` hooks as graph nodes of their own, between the tools
node and the model node (langchain 1.5's ``factory.py``: the tools node routes to the loop's
entry, the first ``before_model``). What such a node returns under ``"messages"`` goes
through LangGraph's ``add_messages`` reducer into the graph's state and its checkpoint, in
place: after every tool result, before the request the model node builds from the state.
A message whose id the state holds already is replaced where it is, never added twice.

So :class:`SteeringMiddleware` takes the steers there. Its ``before_model`` makes one atomic
store call (:meth:`steerable.integrations.Steps.step`): it stores the messages the graph
added since the last step and takes the waiting steers, recorded right after them; the
steers go back to the graph as ``HumanMessage`` objects whose id is the steer's id.
Hooking ``wrap_model_call`` instead, or returning a ``Command``, would put them after the
model's reply, between a tool call and its result: a transcript providers refuse.

The graph's own checkpointer (any, or none) still holds the graph's state. If the process
dies after a step was stored and before the checkpoint that has it, the retried step
finds in the stored transcript what the state lacks and returns it: a steer taken is
given back under its id (``add_messages`` places it once; the store never gives it
twice), and a step the graph ran again is replaced by the stored one (the store wins).
With no checkpointer the state is only the run's input: the same input again after a turn
that did not finish (a prompt without an id gets a new one) resumes that stored turn
rather than start another (``_catch_up.py``).

Tools run with the run's session as their journal (``awrap_tool_call``): a call of a
:func:`~steerable.integrations.langgraph.journaled` tool first stores the reply that made
it (once for all its calls, taking no steer), so a run that dies inside the tool leaves
the call, under its model-given id in the stored reply (whose id its journal key holds
too), in the store. A run whose state ends with such a
reply (a takeover from the stored transcript, a retry with no checkpointer) goes from
``before_model`` straight to the tools (``jump_to``): the model is not asked again, and
the journal answers for each call that began.

With an OpenTelemetry SDK set (:mod:`steerable.telemetry`), each model call is a ``chat
{model}`` span (``awrap_model_call``) and each tool call an ``execute_tool {name}`` span,
children of the current span (a service turn's ``invoke_agent``) and current while the
call runs, ``gen_ai.conversation.id`` the run's session: LangChain makes no spans itself.

A run whose config brings a live sink (a :class:`LangGraphAgent` turn with ``events``)
sees each tool call there too: ``awrap_tool_call`` sends :class:`~steerable.events.
ToolStarted` as the call starts and :class:`~steerable.events.ToolEnded` with the text of
the ToolMessage the model will read (``is_error`` for an error one, or for a call that
raised, whose error goes on to the graph). A journaled call answered from the journal has
no ToolStarted, only a ToolEnded with ``replayed``, as in steerable's own loop.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, NotRequired

from langchain.agents.middleware import AgentMiddleware, AgentState, hook_config
from langchain.agents.middleware.types import (
    ExtendedModelResponse,
    ModelRequest,
    ModelResponse,
    PrivateStateAttr,
)
from langchain_core.messages import AIMessage, AnyMessage, RemoveMessage, ToolMessage
from langgraph.channels.untracked_value import UntrackedValue
from langgraph.config import get_config
from langgraph.errors import GraphBubbleUp
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.runtime import Runtime
from langgraph.types import Command

from steerable import telemetry
from steerable.errors import UsageError
from steerable.events import ToolEnded, ToolStarted
from steerable.integrations import _spans
from steerable.integrations._journal import journal_session
from steerable.integrations._steps import Steps
from steerable.integrations.langgraph._catch_up import behind
from steerable.integrations.langgraph._deltas import TextDeltas
from steerable.integrations.langgraph._journaled import CallWatch, is_journaled, watching
from steerable.integrations.langgraph._records import (
    from_stored,
    steer_message,
    stored_ids,
    to_stored,
    unanswered_tail,
)
from steerable.messages import Message, ToolCall, ToolResult, new_id
from steerable.session import Session
from steerable.store import Store, check_count, check_session_id

__all__ = ["SteeringMiddleware"]

_ASYNC_ONLY = "SteeringMiddleware stores through an async session: run the graph with ainvoke"

# The config key a run brings its own session under (LangGraphAgent's turns: the turn's
# fenced session and steer cap). "__" keeps it out of checkpoint metadata.
RUN_SESSION = "__steerable_session"


@dataclass(frozen=True, slots=True)
class RunSession:
    """A run's own session and steer cap, in its config under :data:`RUN_SESSION`, and
    the live sink its tool calls are sent to (None: nobody watches)."""

    session: Session
    steers: int
    live: TextDeltas | None = None


class SteeringState(AgentState[Any]):
    """``create_agent``'s state with the id of the run that began it (never checkpointed).

    Every node of a run gets its own asyncio task, so no task tells one run from another;
    this run-scoped value (``UntrackedValue``, like langchain's own run-level counters) does.
    """

    steerable_run: NotRequired[Annotated[str, UntrackedValue, PrivateStateAttr]]


@dataclass(slots=True)
class _Run:
    """The run under way on one session through this middleware."""

    id: str
    session: Session
    steers: int
    steps: Steps | None = None
    ids: set[str] = field(default_factory=set)  # the langchain ids stored
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # a reply stored before its tools


class SteeringMiddleware(AgentMiddleware[SteeringState, Any, Any]):
    """Takes each run's session's steers before each model call and stores the conversation.

    ``SteeringMiddleware(store)``: a run's session is its thread, ``config["configurable"]
    ["thread_id"]`` (``str``'d), so one ``create_agent(...)`` serves every session, as one
    compiled graph serves every thread. ``SteeringMiddleware(session)``: every run is that
    one session, whatever its thread. (``None``: each run brings its session in its
    config, as :class:`LangGraphAgent` turns do.)

    ``steers`` is how many steers one run (one ``ainvoke``) takes at most; the rest wait
    for the next run. The conversation goes into the session's transcript at every step:
    the prompt and the steers as steerable user messages, the graph's other messages as
    :class:`~steerable.Native` records (:mod:`steerable.integrations.langgraph`).

    One run at a time per session: a run that begins on a session while another is under
    way on it takes the session over, and the run it took it from fails at its next step
    with :class:`UsageError`, storing nothing more (their messages would interleave in one
    transcript). No hook runs when a run fails or is cancelled, so a live run cannot be
    told from a dead one at the newcomer's start: the older run is the one refused. Runs
    on other sessions go on side by side.
    """

    state_schema = SteeringState

    def __init__(self, store: Store | Session | None = None, *, steers: int = 16) -> None:
        super().__init__()
        if store is not None and not isinstance(store, Session | Store):
            raise UsageError(
                f"SteeringMiddleware takes a steerable Store (a run's session is its"
                f" thread_id) or a Session, not {store!r}"
            )
        self.session = store if isinstance(store, Session) else None
        self.store = store.store if isinstance(store, Session) else store
        self.steers = check_count(steers, "steers")
        self._runs: dict[str, _Run] = {}  # by session id: the run that holds it

    def __repr__(self) -> str:
        if self.session is not None:
            over = repr(self.session)
        else:
            over = "None" if self.store is None else type(self.store).__name__
        return f"SteeringMiddleware({over}, steers={self.steers})"

    def taken(self, session: str | None = None) -> list[Message]:
        """The steers the run under way on ``session`` took so far, in order (``session``
        may be left out for a middleware over one Session)."""
        if session is None and self.session is not None:
            session = self.session.id
        run = self._runs.get(check_session_id(session))
        return [] if run is None or run.steps is None else list(run.steps.taken)

    # LangGraph calls the sync hooks under invoke/stream: say so rather than block on I/O.
    def before_agent(self, state: SteeringState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Refused: see :meth:`abefore_agent`."""
        raise UsageError(_ASYNC_ONLY)

    def before_model(self, state: SteeringState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Refused: see :meth:`abefore_model`."""
        raise UsageError(_ASYNC_ONLY)

    def after_agent(self, state: SteeringState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Refused: see :meth:`aafter_agent`."""
        raise UsageError(_ASYNC_ONLY)

    async def abefore_agent(
        self, state: SteeringState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """A new run: it holds its session, its steer count starts again, and what is
        stored is read afresh."""
        run = self._begin_run()
        return {"steerable_run": run.id}

    @hook_config(can_jump_to=["tools"])
    async def abefore_model(
        self, state: SteeringState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Store what the graph added and take the waiting steers, in one store call.

        A state that ends with a reply whose tool calls have no result (a takeover, or a
        retry, of a run that died in the tools of a reply stored before them) goes on to
        the tools, taking no steer: the model is not asked again, so the calls keep their
        ids and a journaled one is found in the journal."""
        run = self._hold(state)
        messages = list(state["messages"])
        steps = await _steps(run)
        # What the store holds past the graph's state: an earlier attempt's step whose
        # checkpoint was lost with its process, or a retry with no checkpointer.
        dropped, stored = behind(steps.stored, messages)
        kept = [m for m in messages if m.id not in dropped]
        new = _new(run, kept)
        restored = from_stored(stored)
        back: list[Any] = [RemoveMessage(id=id) for id in dropped] + restored
        if _pending([*kept, *restored]):
            await steps.save(new)
            run.ids.update(m.id for m in new)
            return {"messages": back, "steerable_run": run.id, "jump_to": "tools"}
        taken = await steps.step(new)
        run.ids.update(m.id for m in [*new, *taken])
        back += [steer_message(m) for m in taken]
        return {"messages": back, "steerable_run": run.id}

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        """Refused: see :meth:`awrap_model_call`."""
        raise UsageError(_ASYNC_ONLY)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        """Call the model, in a ``chat`` span when an OpenTelemetry SDK is set."""
        if telemetry.tracer() is None:
            return await handler(request)
        provider, model = _model_names(request.model)
        session, _ = self._session_of_run()
        with _spans.chat_span(session.id, model, provider) as span:
            response = await handler(request)
            _replied(span, response)
            return response

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        """Refused: see :meth:`awrap_tool_call`."""
        raise UsageError(_ASYNC_ONLY)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        """Run a tool with the run's session as the journal of its calls
        (:func:`~steerable.integrations.langgraph.journaled`); for a journaled tool, store
        the reply that called it first (once for the reply), taking no steer."""
        run = self._running()
        journaled = is_journaled(request.tool)
        if journaled:
            await self._store_reply(run, request)
        given = _configurable().get(RUN_SESSION)
        live = given.live if isinstance(given, RunSession) else None
        with journal_session(run.session):
            if telemetry.tracer() is None:
                return await _called(live, request, handler, journaled=journaled)
            return await _traced(run.session.id, live, request, handler, journaled=journaled)

    def _running(self) -> _Run:
        """The run under way on the run's session (begun here for a run resumed at its
        tools from a checkpoint: no hook of it ran in this process)."""
        session, _ = self._session_of_run()
        run = self._runs.get(session.id)
        return run if run is not None else self._begin_run()

    async def _store_reply(self, run: _Run, request: ToolCallRequest) -> None:
        """Store the state's messages through the reply that made ``request``'s call."""
        state = request.state
        messages = list(state.get("messages", []) if isinstance(state, dict) else [])
        call_id = request.tool_call.get("id")
        at = next(
            (
                i
                for i in range(len(messages) - 1, -1, -1)
                if isinstance(messages[i], AIMessage)
                and any(c.get("id") == call_id for c in messages[i].tool_calls)
            ),
            None,
        )
        if at is None:
            return
        async with run.lock:  # a reply's calls run side by side: the first one stores it
            if messages[at].id in run.ids:
                return
            steps = await _steps(run)
            if messages[at].id in run.ids:
                return
            pending = steps.stored[-1] if steps.stored else None
            if pending is not None and _pending(from_stored([pending])):
                raise UsageError(
                    f"session {run.session.id!r} ends with a stored reply whose tool calls"
                    " have no result, and the graph runs the calls of another one: a"
                    " checkpoint older than the store was resumed (run a graph with a"
                    " checkpointer with durability='sync')"
                )
            new = _new(run, messages[: at + 1])
            await steps.save(new)
            run.ids.update(m.id for m in new)

    async def aafter_agent(
        self, state: SteeringState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Store the run's last messages (its answer), taking no steer: a steer that came
        while the model wrote the answer waits for the next run. The run lets go of its
        session."""
        run = self._hold(state)
        steps = await _steps(run)
        messages = state["messages"]
        await steps.save(_new(run, messages[: len(messages) - unanswered_tail(messages)]))
        if self._runs.get(run.session.id) is run:
            del self._runs[run.session.id]
        return None

    def _begin_run(self) -> _Run:
        session, steers = self._session_of_run()
        run = _Run(new_id(), session, steers)
        self._runs[session.id] = run  # an older run on the session is refused from now on
        return run

    def _hold(self, state: SteeringState) -> _Run:
        """The run of ``state``, refused unless it still holds its session.

        A run resumed after an interrupt has no id (untracked values are not checkpointed):
        it takes its session, as a new run would."""
        id = state.get("steerable_run")
        if id is None:
            return self._begin_run()
        session, _ = self._session_of_run()
        run = self._runs.get(session.id)
        if run is None or run.id != id:
            raise UsageError(
                f"another run on session {session.id!r} began while this one ran: one run"
                " of a session at a time (this run stops here, storing nothing more)"
            )
        return run

    def _session_of_run(self) -> tuple[Session, int]:
        """The session the run under way stores into, and its steer cap."""
        configurable = _configurable()
        given = configurable.get(RUN_SESSION)
        if isinstance(given, RunSession):
            return given.session, given.steers
        if self.session is not None:
            return self.session, self.steers
        thread = configurable.get("thread_id")
        if self.store is None or thread is None:
            raise UsageError(
                "SteeringMiddleware(store) stores each run into the session of its thread:"
                " run the graph with config={'configurable': {'thread_id': ...}}"
                if self.store is not None
                else "SteeringMiddleware() has no store: give it one, or a Session"
            )
        return Session(check_session_id(str(thread)), self.store), self.steers


async def _called(
    live: TextDeltas | None,
    request: ToolCallRequest,
    handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    *,
    journaled: bool,
) -> ToolMessage | Command[Any]:
    if live is None:
        return await handler(request)
    return await _watched(live, request, handler, journaled=journaled)


async def _traced(
    session: str,
    live: TextDeltas | None,
    request: ToolCallRequest,
    handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    *,
    journaled: bool,
) -> ToolMessage | Command[Any]:
    """The call in an ``execute_tool`` span (an interrupt leaves it unfailed: not over)."""
    tool_call = request.tool_call
    name = str(tool_call.get("name", ""))
    id = str(tool_call.get("id") or "")
    arguments = json.dumps(tool_call.get("args", {}), ensure_ascii=False, default=str)
    with _spans.tool_span(session, name, id, arguments, spared=(GraphBubbleUp,)) as span:
        answer = await _called(live, request, handler, journaled=journaled)
        result = _result(ToolCall(id, name, arguments), answer)
        _spans.tool_ended(span, result.content, is_error=result.is_error)
        return answer


def _model_names(model: Any) -> tuple[str | None, str]:
    """The provider and the model name of a LangChain chat model, as LangSmith has them."""
    params: dict[str, Any] = {}
    try:
        params = dict(model._get_ls_params())
    except Exception:  # a model's own override that fails: its names are not worth a call
        params = {}
    name = params.get("ls_model_name") or getattr(model, "model_name", None)
    name = name or getattr(model, "_llm_type", None) or type(model).__name__
    provider = params.get("ls_provider")
    return (str(provider) if provider else None), str(name)


def _replied(span: Any, response: ModelResponse[Any] | Any) -> None:
    """The reply's usage, finish reason and model on its ``chat`` span (what LangChain's
    standard ``usage_metadata`` and ``response_metadata`` say)."""
    messages = response.result if isinstance(response, ModelResponse) else [response]
    reply = next((m for m in messages if isinstance(m, AIMessage)), None)
    if reply is None:
        return
    usage = reply.usage_metadata
    metadata = reply.response_metadata or {}
    reason = metadata.get("finish_reason") or metadata.get("stop_reason")
    _spans.replied(
        span,
        usage=(
            {"input_tokens": usage["input_tokens"], "output_tokens": usage["output_tokens"]}
            if usage
            else None
        ),
        finish_reasons=[str(reason)] if reason else (),
        response_model=metadata.get("model_name"),
    )


async def _watched(
    live: TextDeltas,
    request: ToolCallRequest,
    handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    *,
    journaled: bool,
) -> ToolMessage | Command[Any]:
    """Run the call, sending its ToolStarted and ToolEnded to ``live``.

    A journaled tool says when its function is about to run (then the call starts) and
    when the journal answered instead (a replay: no start)."""
    tool_call = request.tool_call
    id = str(tool_call.get("id") or "")
    name = str(tool_call.get("name", ""))
    call = ToolCall(
        id, name, json.dumps(tool_call.get("args", {}), ensure_ascii=False, default=str)
    )
    started = False

    async def start() -> None:
        nonlocal started
        if not started:
            started = True
            await live.send(ToolStarted(call))

    watch = CallWatch(id, start)
    if not journaled:
        await start()
    try:
        with watching(watch):
            answer = await handler(request)
    except GraphBubbleUp:  # an interrupt: the call has no result yet
        raise
    except Exception as exc:  # it goes on to the graph (and fails the run, or is handled)
        await start()
        await live.send(ToolEnded(call, ToolResult(id, name, f"{type(exc).__name__}: {exc}", True)))
        raise
    if watch.replayed and not started:
        await live.send(ToolEnded(call, _result(call, answer), replayed=True))
    else:
        await start()
        await live.send(ToolEnded(call, _result(call, answer)))
    return answer


def _result(call: ToolCall, answer: ToolMessage | Command[Any]) -> ToolResult:
    """The result the model reads for ``call``: its ToolMessage (in a Command's update)."""
    message: Any = answer
    if isinstance(answer, Command):
        update = answer.update
        found = update.get("messages", []) if isinstance(update, dict) else []
        message = next(
            (m for m in found if isinstance(m, ToolMessage) and m.tool_call_id == call.id), None
        )
    if not isinstance(message, ToolMessage):
        return ToolResult(call.id, call.name, "")
    return ToolResult(call.id, call.name, message.text, message.status == "error")


def _configurable() -> dict[str, Any]:
    """The running graph's ``config["configurable"]`` ({} outside a graph run)."""
    try:
        config = get_config()
    except RuntimeError:
        return {}
    return dict(config.get("configurable") or {})


async def _steps(run: _Run) -> Steps:
    if run.steps is None:
        stored = await run.session.messages()
        run.steps = Steps(run.session, stored, steers=run.steers)
        run.ids = stored_ids(stored)
    return run.steps


def _pending(messages: Sequence[Any]) -> bool:
    """Whether ``messages`` end with a reply whose tool calls have no result yet."""
    last = messages[-1] if messages else None
    return isinstance(last, AIMessage) and bool(last.tool_calls)


def _new(run: _Run, messages: Sequence[AnyMessage]) -> list[Message]:
    return [to_stored(m) for m in messages if m.id not in run.ids]
