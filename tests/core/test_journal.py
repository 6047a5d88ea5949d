"""The tool journal in the loop: a reply stored before its journaled calls run, each call
marked started and its result recorded, and a run that carries a reply's calls on using
what the journal knows. On the memory store, in one process; the SIGKILL tests are in
tests/stores/test_journal_crash.py and tests/service/test_journal_replicas.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from steerable import (
    Message,
    ModelRequest,
    Runner,
    ScriptedModel,
    Spec,
    ToolResult,
    UsageError,
    open_session,
    tool,
    transcript_problems,
    user,
)
from steerable.events import Event, ToolEnded, ToolStarted
from steerable.journal import UNKNOWN, ToolContext, call_key
from steerable.models.scripted import ReplyLike, call
from steerable.store import Steer
from steerable.stores.memory import MemoryStore


class Counting:
    """A store that counts the verbs called on it, over a :class:`MemoryStore`."""

    def __init__(self, inner: MemoryStore, *, journal: bool = True) -> None:
        self.inner = inner
        self.calls: list[str] = []
        if journal:
            self.begin_calls = self._begin_calls
            self.end_call = self._end_call

    async def messages(self, session: str) -> list[Message]:
        self.calls.append("messages")
        return await self.inner.messages(session)

    async def save(
        self, session: str, messages: Sequence[Message], *, at: int, take: int = 0
    ) -> list[Message]:
        self.calls.append("save")
        return await self.inner.save(session, messages, at=at, take=take)

    async def steer(self, session: str, steer: Steer) -> None:
        await self.inner.steer(session, steer)

    async def take_steers(self, session: str, *, at: int | None, limit: int) -> list[Message]:
        self.calls.append("take_steers")
        return await self.inner.take_steers(session, at=at, limit=limit)

    async def steers(self, session: str) -> list[Steer]:
        return await self.inner.steers(session)

    async def _begin_calls(self, session: str, keys: Sequence[str]) -> dict[str, Any]:
        self.calls.append("begin_calls")
        return await self.inner.begin_calls(session, keys)

    async def _end_call(self, session: str, key: str, result: ToolResult) -> ToolResult:
        self.calls.append("end_call")
        return await self.inner.end_call(session, key, result)


def _model() -> ScriptedModel:
    """Calls ``pay`` once, then answers with what the call's result said."""

    def reply(request: ModelRequest) -> ReplyLike:
        results = [r for m in request.messages for r in m.tool_results]
        if not results:
            return call("pay", '{"amount": 5}', id="call-pay")
        return f"done: {results[-1].content}"

    return ScriptedModel([reply] * 4)


def _ledger_tool(ledger: list[ToolContext], *, idempotent: bool = False) -> Any:
    @tool(side_effects=True, idempotent=idempotent)
    async def pay(amount: int, context: ToolContext) -> str:
        """Pay ``amount``."""
        ledger.append(context)
        return f"paid {amount}"

    return pay


async def test_a_journaled_call_runs_after_its_reply_is_stored_and_is_recorded() -> None:
    store = MemoryStore()
    session = open_session("s", store)
    stored_then: list[list[Message]] = []

    @tool(side_effects=True)
    async def pay(amount: int, context: ToolContext) -> str:
        """Pay ``amount``."""
        stored_then.append(await store.messages("s"))
        return f"paid {amount} under {context.key}"

    result = await Runner.run(Spec(tools=[pay], session=session), [user("pay")], _model())
    assert result.reason == "completed"
    reply = result.transcript[1]
    assert stored_then[0][-1] == reply  # the reply was stored before its call ran
    key = call_key("s", reply.id, "call-pay")
    known = await store.begin_calls("s", [key])
    assert known == {key: ToolResult("call-pay", "pay", f"paid 5 under {key}")}
    assert transcript_problems(await store.messages("s")) == []


async def test_a_run_without_journaled_tools_makes_one_store_call_a_step() -> None:
    store = Counting(MemoryStore())

    @tool
    async def pay(amount: int) -> str:
        """Pay ``amount``."""
        return "paid"

    session = open_session("s", store)
    result = await Runner.run(Spec(tools=[pay], session=session), [user("pay")], _model())
    assert result.reason == "completed"
    # the first save reads the store once to check the transcript; then a save a step and
    # the save once the pattern returns: no journal call
    assert store.calls == ["messages", "save", "save", "save"]


async def test_a_journaled_call_costs_a_reply_save_a_begin_and_an_end() -> None:
    store = Counting(MemoryStore())
    ledger: list[ToolContext] = []
    session = open_session("s", store)
    spec = Spec(tools=[_ledger_tool(ledger)], session=session)
    await Runner.run(spec, [user("pay")], _model())
    assert store.calls == ["messages", "save", "save", "begin_calls", "end_call", "save", "save"]


async def test_the_key_is_stable_for_a_call_and_distinct_across_calls_and_sessions() -> None:
    store = MemoryStore()
    ledger: list[ToolContext] = []
    pay = _ledger_tool(ledger)

    def two_calls(request: ModelRequest) -> ReplyLike:
        if any(m.tool_results for m in request.messages):
            return "done"
        return [call("pay", '{"amount": 1}', id="a"), call("pay", '{"amount": 2}', id="b")]

    for sid in ("one", "two"):
        spec = Spec(tools=[pay], session=open_session(sid, store))
        await Runner.run(spec, [user("pay", id="same-prompt")], ScriptedModel([two_calls] * 2))
    keys = [c.key for c in ledger]
    assert len(set(keys)) == 4 and all(len(k) == 32 for k in keys)
    assert [c.session for c in ledger] == ["one", "one", "two", "two"]
    replies = {sid: (await store.messages(sid))[1].id for sid in ("one", "two")}
    assert keys[0] == call_key("one", replies["one"], "a")  # what any retry computes again
    assert keys[3] == call_key("two", replies["two"], "b")
    assert pay.parameters["properties"].keys() == {"amount"}  # the model never sees it


async def _interrupted(store: MemoryStore, sid: str, *, begun: bool, ended: str | None) -> str:
    """A session whose last message is a reply calling ``pay`` that never got a result (as
    if its process died): the call begun or not in the journal, ended or not."""
    reply = Message("assistant", (call("pay", '{"amount": 5}', id="call-pay"),))
    await store.save(sid, [user("pay"), reply], at=0)
    key = call_key(sid, reply.id, "call-pay")
    if begun:
        await store.begin_calls(sid, [key])
    if ended is not None:
        await store.end_call(sid, key, ToolResult("call-pay", "pay", ended))
    return key


async def _resume(store: MemoryStore, sid: str, pay: Any) -> tuple[Any, list[Event]]:
    events: list[Event] = []
    session = open_session(sid, store)
    messages = await session.messages()
    result = await Runner.run(Spec(tools=[pay], session=session), messages, _model(), events.append)
    assert transcript_problems(await store.messages(sid)) == []
    return result, events


async def test_a_resumed_run_uses_a_recorded_result_and_runs_nothing() -> None:
    store, ledger = MemoryStore(), []  # type: ignore[var-annotated]
    await _interrupted(store, "s", begun=True, ended="paid 5 before the crash")
    result, events = await _resume(store, "s", _ledger_tool(ledger))
    assert ledger == []
    assert result.output == "done: paid 5 before the crash"
    ended = [e for e in events if isinstance(e, ToolEnded)]
    assert [e.replayed for e in ended] == [True]
    assert not any(isinstance(e, ToolStarted) for e in events)


async def test_a_resumed_run_tells_the_model_an_interrupted_call_is_unknown() -> None:
    store, ledger = MemoryStore(), []  # type: ignore[var-annotated]
    key = await _interrupted(store, "s", begun=True, ended=None)
    result, _ = await _resume(store, "s", _ledger_tool(ledger))
    assert ledger == []
    assert result.output == f"done: {UNKNOWN}"
    assert (await store.begin_calls("s", [key]))[key] == ToolResult(
        "call-pay", "pay", UNKNOWN, True
    )


async def test_a_resumed_run_runs_an_interrupted_idempotent_call_again_with_its_key() -> None:
    store, ledger = MemoryStore(), []  # type: ignore[var-annotated]
    key = await _interrupted(store, "s", begun=True, ended=None)
    result, _ = await _resume(store, "s", _ledger_tool(ledger, idempotent=True))
    assert [(c.key, c.retried) for c in ledger] == [(key, True)]
    assert result.output == "done: paid 5"


async def test_a_resumed_run_runs_a_call_that_never_began() -> None:
    store, ledger = MemoryStore(), []  # type: ignore[var-annotated]
    key = await _interrupted(store, "s", begun=False, ended=None)
    result, _ = await _resume(store, "s", _ledger_tool(ledger))
    assert [(c.key, c.retried) for c in ledger] == [(key, False)]
    assert result.output == "done: paid 5"


async def test_a_plain_call_of_an_interrupted_reply_runs_again() -> None:
    """Without the journal, a reply's calls are redone, as a redone step always did."""
    store, ran = MemoryStore(), []

    @tool
    async def pay(amount: int) -> str:
        """Pay ``amount``."""
        ran.append(amount)
        return f"paid {amount}"

    await _interrupted(store, "s", begun=False, ended=None)
    result, _ = await _resume(store, "s", pay)
    assert ran == [5] and result.output == "done: paid 5"


async def test_a_tool_with_side_effects_needs_a_store_with_a_journal() -> None:
    session = open_session("s", Counting(MemoryStore(), journal=False))
    with pytest.raises(UsageError, match="tool journal"):
        await Runner.run(Spec(tools=[_ledger_tool([])], session=session), [user("pay")], _model())


async def test_without_a_session_a_tool_with_side_effects_just_runs() -> None:
    ledger: list[ToolContext] = []
    result = await Runner.run(Spec(tools=[_ledger_tool(ledger)]), [user("pay")], _model())
    assert result.output == "done: paid 5"
    assert [c.session for c in ledger] == [None] and len(ledger[0].key) == 32


def test_side_effects_and_idempotent_are_flags_of_the_tool() -> None:
    pay = _ledger_tool([], idempotent=True)
    assert (pay.side_effects, pay.idempotent) == (True, True)
    with pytest.raises(UsageError, match="True or False"):
        tool(side_effects="yes")  # type: ignore[call-overload]

    def two(a: ToolContext, b: ToolContext) -> str:
        return ""

    with pytest.raises(UsageError, match="one ToolContext"):
        tool(two)


async def test_a_stop_during_a_journaled_call_leaves_it_started() -> None:
    """A stopped call's result is an error in the transcript; the journal keeps it started."""
    memory = MemoryStore()
    gate = asyncio.Event()

    @tool(side_effects=True)
    async def pay(amount: int) -> str:
        """Pay ``amount``."""
        gate.set()
        await asyncio.sleep(60)
        return "never"

    session = open_session("s", memory)
    run = Runner.start(Spec(tools=[pay], session=session), [user("pay")], _model())
    await gate.wait()
    run.stop()
    result = await run
    assert result.reason == "stopped"
    reply = (await memory.messages("s"))[1]
    key = call_key("s", reply.id, "call-pay")
    assert await memory.begin_calls("s", [key]) == {key: None}
