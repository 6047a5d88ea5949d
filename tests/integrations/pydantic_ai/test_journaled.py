"""``journaled``: a Pydantic AI tool function whose calls run at most once, across crashes.

A worker process (``journal_run.py``) runs an Agent given ``Steering``, whose model calls
``pay``, a journaled tool whose effect is a line in a ledger file, and kills itself with
SIGKILL at one point; a fresh process carries the turn on through the integration's retry
path. The reply with the call is stored before the call begins, so the retry runs the same
call (the model's call id), never a new one: the ledger shows the effect once, or (an
idempotent tool killed inside it) twice under one key, the second retried.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent, RunContext
from pydantic_ai.capabilities import AbstractCapability, ValidatedToolArgs
from pydantic_ai.messages import (
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.test import TestModel
from pydantic_ai.run import AgentRunResultEvent
from pydantic_ai.tools import ToolDefinition

from steerable import Session, UsageError, transcript_problems
from steerable.integrations._journal import journal_session
from steerable.integrations.pydantic_ai import PydanticAIAgent, Steering, history, journaled
from steerable.integrations.pydantic_ai._records import record
from steerable.journal import UNKNOWN, ToolContext, call_key
from steerable.messages import ToolResult
from steerable.service import Service
from steerable.stores.memory import MemoryStore
from steerable.stores.url import open_url
from tests.integrations.pydantic_ai.support import Script, call, problems, say
from tests.ledger import ledger_lines, run_worker


async def _worker(
    url: str, point: str, role: str, idempotent: bool, ledger: Path, shape: str
) -> Any:
    args = ("-m", "tests.integrations.pydantic_ai.journal_run", url, point, role)
    rest = ("yes" if idempotent else "no", str(ledger), shape)
    return await run_worker((*args, *rest), killed=role == "first", seconds=60)


def _lines(ledger: Path) -> list[list[str]]:
    return ledger_lines(ledger)


# point, idempotent: ledger lines (key, retried, call id) after the resume, the first
# request's returns after the resume ([call id, content, outcome])
CASES: dict[str, tuple[str, bool, list[str], list[list[str]]]] = {
    "killed in the tool": ("in-tool", False, ["False"], [["call-first", UNKNOWN, "failed"]]),
    "killed in the tool, idempotent": (
        "in-tool",
        True,
        ["False", "True"],
        [["call-first", "paid 5", "success"]],
    ),
    "killed after the result was recorded": (
        "after-end",
        False,
        ["False"],
        [["call-first", "paid 5", "success"]],
    ),
}


async def _killed_and_carried_on(url: str, case: str, tmp_path: Path, shape: str = "agent") -> None:
    point, idempotent, retried, returns = CASES[case]
    ledger = tmp_path / "ledger"
    await _worker(url, point, "first", idempotent, ledger, shape)
    assert len(_lines(ledger)) == 1  # the tool took effect before the kill
    async with open_url(url) as store:
        killed = await store.messages("journal")
    # the premise: the reply with the call was stored before the call ran
    assert [m.role for m in killed] == ["user", "assistant"]
    assert [c.id for c in killed[-1].tool_calls] == ["call-first"]

    resumed = await _worker(url, point, "resume", idempotent, ledger, shape)
    lines = _lines(ledger)
    assert [retried_ for _, retried_, _ in lines] == retried
    assert len({key for key, _, _ in lines}) == 1  # one call, one key, on every run of it
    # keyed by the stored reply that made it: the same message on the first run and the retry
    reply = killed[-1].id
    assert {line[0] for line in lines} == {
        call_key("journal", f"pydantic_ai/{reply}", "call-first")
    }
    assert {call_id for _, _, call_id in lines} == {"call-first"}  # never a new call
    assert resumed["returns"] == returns  # what the model read of the call
    assert resumed["asked"] == 1  # the model was asked only for its answer
    async with open_url(url) as store:
        stored = await store.messages("journal")
    assert [m.role for m in stored] == ["user", "assistant", "user", "assistant"]
    assert stored[1].id == reply  # the reply was not stored again under another id
    assert transcript_problems(stored) == []
    assert problems(history(stored)) == []  # the call's return is the real one, not made up


@pytest.mark.parametrize("case", list(CASES))
async def test_a_run_killed_in_a_journaled_call_is_carried_on_under_the_same_call_id(
    store_url: str, case: str, tmp_path: Path
) -> None:
    await _killed_and_carried_on(store_url, case, tmp_path)


async def test_the_per_run_shape_carries_the_killed_call_on_too(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'load.db'}"
    await _killed_and_carried_on(url, "killed in the tool", tmp_path, shape="load")


async def _key(store: MemoryStore, session: str, call_id: str, nth: int = 0) -> str:
    """The key of the call ``call_id`` that the ``nth`` stored reply making one made."""
    stored = await Session(session, store).messages()
    replies = [m for m in stored if any(c.id == call_id for c in m.tool_calls)]
    return call_key(session, f"pydantic_ai/{replies[nth].id}", call_id)


class _FailAfterTheTool(AbstractCapability[Any]):
    """Fails the run once a tool returned (its result recorded): a crash, in-process."""

    async def after_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: Any,
        tool_def: ToolDefinition,
        args: ValidatedToolArgs,
        result: Any,
    ) -> Any:
        raise RuntimeError("crashed after the tool")


async def test_keys_are_stable_across_retries_and_distinct_across_calls_and_sessions() -> None:
    store = MemoryStore()
    contexts: list[ToolContext] = []
    failing = {"a", "b"}

    @journaled(idempotent=True)
    async def pay(amount: int, context: ToolContext) -> str:
        """Pay ``amount``."""
        contexts.append(context)
        if context.session in failing:
            failing.discard(context.session)
            raise RuntimeError("the payment service went away")
        return f"paid {amount}"

    for session in ("a", "b"):
        script = Script(
            call("pay", "c1", '{"amount": 1}'), call("pay", "c2", '{"amount": 2}'), say("done")
        )
        agent = Agent(script.model, tools=[pay], capabilities=[Steering(store)])
        with pytest.raises(RuntimeError, match="went away"):
            await agent.run("pay", conversation_id=session)
        stored = await Session(session, store).messages()
        assert [c.id for c in stored[-1].tool_calls] == ["c1"]  # stored before the call ran
        result = await agent.run(None, conversation_id=session)  # the retry: c1 again, then c2
        assert result.output == "done"
        assert len(script.requests) == 3  # c1 was not asked for again

    seen = [(c.session, c.call.id, c.retried, c.key) for c in contexts]
    assert [(s, i, r) for s, i, r, _ in seen] == [
        ("a", "c1", False),
        ("a", "c1", True),
        ("a", "c2", False),
        ("b", "c1", False),
        ("b", "c1", True),
        ("b", "c2", False),
    ]
    assert all([k == await _key(store, str(s), i) for s, i, _, k in seen])  # s: "a" or "b"
    assert seen[0][3] == seen[1][3]  # the retry of a call has its key
    assert len({k for _, _, _, k in seen}) == 4  # every other call, in every session, has its own


async def test_a_recorded_output_that_is_not_text_is_replayed_as_its_json() -> None:
    store = MemoryStore()
    runs: list[int] = []

    @journaled
    def quote(amount: int) -> dict[str, Any]:
        """A quote for ``amount``."""
        runs.append(amount)
        return {"amount": amount, "fee": 0.5, "items": [1, 2]}

    script = Script(call("quote", "q1", '{"amount": 3}'), say("ok"))
    crashing = Agent(
        script.model, tools=[quote], capabilities=[Steering(store), _FailAfterTheTool()]
    )
    with pytest.raises(RuntimeError, match="crashed after the tool"):
        await crashing.run("quote", conversation_id="s")
    agent = Agent(script.model, tools=[quote], capabilities=[Steering(store)])
    result = await agent.run(None, conversation_id="s")
    assert runs == [3]  # replayed, not run again
    returned = [p for m in result.all_messages() for p in m.parts if isinstance(p, ToolReturnPart)]
    assert [p.content for p in returned] == [{"amount": 3, "fee": 0.5, "items": [1, 2]}]
    assert returned[0].model_response_str() == '{"amount":3,"fee":0.5,"items":[1,2]}'


async def test_a_call_told_unknown_stays_unknown_and_the_tool_keeps_its_schema() -> None:
    store = MemoryStore()
    session = Session("s", store)

    @journaled
    async def pay(ctx: RunContext[None], amount: int, context: ToolContext) -> str:
        """Pay ``amount``."""
        raise AssertionError("a call that started is not run again")

    script = Script(say("checked"))
    agent = Agent(script.model, capabilities=[Steering(store)])
    agent.tool(pay)
    schema = agent._function_toolset.tools["pay"].tool_def
    assert schema.description == "Pay ``amount``."
    assert schema.parameters_json_schema["properties"] == {"amount": {"type": "integer"}}
    # what a run that stored the reply and began the call, then died, left
    reply = record(call("pay", "p1", '{"amount": 5}'))
    await session.save([record(ModelRequest(parts=[UserPromptPart("pay")]), prompt=True), reply])
    key = call_key("s", f"pydantic_ai/{reply.id}", "p1")
    await session.begin_calls([key])
    result = await agent.run(None, conversation_id="s")
    assert result.output == "checked"
    returned = [p for p in script.requests[0][-1].parts if isinstance(p, ToolReturnPart)]
    assert [(p.tool_call_id, p.content, p.outcome) for p in returned] == [("p1", UNKNOWN, "failed")]
    recorded = await session.begin_calls([key])
    assert recorded[key] == ToolResult("p1", "pay", UNKNOWN, True)


async def test_with_no_session_a_journaled_tool_just_runs() -> None:
    contexts: list[ToolContext] = []

    @journaled
    def pay(amount: int, context: ToolContext) -> str:
        """Pay ``amount``."""
        contexts.append(context)
        return f"paid {amount}"

    script = Script(call("pay", "c1", '{"amount": 5}'), say("done"))
    result = await Agent(script.model, tools=[pay]).run("pay")  # no Steering: no session
    assert result.output == "done"
    assert await pay(amount=7) == "paid 7"  # outside any run too (the wrapper is async)
    assert [(c.session, c.call.id) for c in contexts[:1]] == [(None, "")]
    assert contexts[0].key == call_key(None, "pydantic_ai", "")


async def test_a_session_without_steerings_hook_is_refused() -> None:
    @journaled
    async def pay(amount: int) -> str:
        """Pay ``amount``."""
        raise AssertionError("never run unjournaled")

    with journal_session(Session("s", MemoryStore())), pytest.raises(UsageError, match="call id"):
        await pay(amount=1)


async def test_under_the_service_the_turns_session_is_the_journal() -> None:
    store = MemoryStore()
    agent = Agent(TestModel(call_tools=["pay"]))
    seen: list[tuple[str | None, str, str | None]] = []

    @agent.tool
    @journaled
    async def pay(ctx: RunContext[None], amount: int, context: ToolContext) -> str:
        """Pay ``amount``."""
        seen.append((context.session, context.key, ctx.tool_call_id))
        return "paid"

    service = Service(store, PydanticAIAgent(agent), poll=0.05)
    async with service.serving():
        sent = await service.send("s", "pay")
        done = await service.wait("s", sent.id, seconds=10)
    assert done is not None and done.state == "completed"
    assert len(seen) == 1
    session, key, call_id = seen[0]
    assert session == "s" and call_id is not None
    assert key == await _key(store, "s", call_id)
    assert (await Session("s", store).begin_calls([key]))[key] == ToolResult(call_id, "pay", "paid")


@pytest.mark.parametrize("mode", ["run", "iter", "stream events"])
async def test_every_way_of_running_journals_and_a_reply_with_two_calls_is_stored_once(
    mode: str,
) -> None:
    store = MemoryStore()
    contexts: list[ToolContext] = []
    stored_when_called: list[list[str]] = []

    @journaled
    async def pay(amount: int, context: ToolContext) -> str:
        """Pay ``amount``."""
        contexts.append(context)
        stored = await Session("s", store).messages()
        stored_when_called.append([c.id for m in stored for c in m.tool_calls])
        await asyncio.sleep(0.01)  # the two calls run at once
        return f"paid {amount}"

    both = ModelResponse(
        parts=[
            ToolCallPart("pay", '{"amount": 1}', tool_call_id="c1"),
            ToolCallPart("pay", '{"amount": 2}', tool_call_id="c2"),
        ]
    )
    script = Script(both, say("done"))
    agent = Agent(script.model, tools=[pay], capabilities=[Steering(store)])
    if mode == "run":
        output = (await agent.run("pay", conversation_id="s")).output
    elif mode == "iter":
        async with agent.iter("pay", conversation_id="s") as run:
            async for _ in run:
                pass
        assert run.result is not None
        output = run.result.output
    else:
        async with agent.run_stream_events("pay", conversation_id="s") as stream:
            events = [e async for e in stream]
        output = next(e.result.output for e in events if isinstance(e, AgentRunResultEvent))
    assert output == "done"
    assert sorted((c.session, c.call.id) for c in contexts) == [("s", "c1"), ("s", "c2")]
    assert stored_when_called == [["c1", "c2"], ["c1", "c2"]]  # the reply, before either ran
    stored = await Session("s", store).messages()
    assert [m.role for m in stored] == ["user", "assistant", "user", "assistant"]  # once
    assert transcript_problems(stored) == []


async def test_two_replies_calling_under_one_call_id_are_two_calls() -> None:
    """A model that numbers each reply's calls from ``call_0``: the second turn's call has the
    first's id. Each is run under its own key (the stored reply that made it is in the key),
    and the second turn, carried on after a crash, replays ITS call's result."""
    store = MemoryStore()
    runs: list[tuple[int, str]] = []

    @journaled
    async def pay(amount: int, context: ToolContext) -> str:
        """Pay ``amount``."""
        runs.append((amount, context.key))
        return f"paid {amount}"

    script = Script(
        call("pay", "call_0", '{"amount": 1}'),
        say("one"),
        call("pay", "call_0", '{"amount": 2}'),
        say("two"),
    )
    agent = Agent(script.model, tools=[pay], capabilities=[Steering(store)])
    assert (await agent.run("pay 1", conversation_id="s")).output == "one"
    crashing = Agent(script.model, tools=[pay], capabilities=[Steering(store), _FailAfterTheTool()])
    with pytest.raises(RuntimeError, match="crashed after the tool"):
        await crashing.run("pay 2", conversation_id="s")
    result = await agent.run(None, conversation_id="s")  # the second turn, carried on
    assert result.output == "two"

    first, second = await _key(store, "s", "call_0", 0), await _key(store, "s", "call_0", 1)
    assert first != second
    assert runs == [(1, first), (2, second)]  # both ran, each once, under its own key
    returned = [p for p in script.requests[-1][-1].parts if isinstance(p, ToolReturnPart)]
    assert [(p.tool_call_id, p.content) for p in returned] == [("call_0", "paid 2")]
    recorded = await Session("s", store).begin_calls([first, second])
    assert recorded == {
        first: ToolResult("call_0", "pay", "paid 1"),
        second: ToolResult("call_0", "pay", "paid 2"),
    }
    stored = await Session("s", store).messages()
    assert [m.role for m in stored] == ["user", "assistant", "user", "assistant"] * 2
    assert transcript_problems(stored) == []
