"""``journaled`` ADK tools: each call runs once, across a SIGKILL and a takeover.

The crash tests run ``journal_run.py``: a service turn of ``ADKAgent`` whose model calls a
journaled ``pay`` (its effect a line in a ledger file) is killed before the call began,
inside the tool after its effect, or after its result was recorded; a fresh process takes
the turn over. The reply that called ``pay`` was stored before the tool ran, so the
takeover carries that same call on (ADK replays it, under its stored id) rather than
asking the model again, which would call ``pay`` under a fresh id and pay twice.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.agents.invocation_context import InvocationContext
from google.adk.apps import App, ResumabilityConfig
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.tools.function_tool import FunctionTool
from google.adk.tools.tool_context import ToolContext as AdkToolContext
from google.genai import types

from steerable import transcript_problems
from steerable.integrations._journal import journal_session
from steerable.integrations.adk import SteerableSessionService, SteeringPlugin, _records, journaled
from steerable.journal import UNKNOWN, ToolContext, call_key
from steerable.messages import Message
from steerable.session import Session
from steerable.stores.memory import MemoryStore
from steerable.stores.url import open_url
from tests.integrations.adk.scripted import ScriptedLlm, call, recorded, say, texts_of
from tests.ledger import ledger_lines, run_worker

PAID = {"paid": 5}

# point, idempotent: ledger lines after the kill, after the takeover; what pay answered
CASES = {
    "killed inside the tool": ("in-tool", False, 1, 1, {"error": UNKNOWN}),
    "killed inside an idempotent tool": ("in-tool", True, 1, 2, PAID),
    "killed after the result was recorded": ("after-end", False, 1, 1, PAID),
    "killed before the call began": ("before-begin", False, 0, 1, PAID),
}


async def _run(url: str, point: str, role: str, idempotent: bool, where: Path) -> Any:
    args = ("-m", "tests.integrations.adk.journal_run", url, point, role)
    files = (str(where / "ledger"), str(where / "requests.jsonl"))
    return await run_worker((*args, "yes" if idempotent else "no", *files), killed=role == "first")


def _ledger(where: Path) -> list[list[str]]:
    return ledger_lines(where / "ledger")


def _responses(contents: list[dict[str, Any]]) -> list[Any]:
    return [
        part["function_response"]["response"]
        for content in contents
        for part in content.get("parts", [])
        if "function_response" in part
    ]


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
async def test_a_journaled_call_killed_is_carried_on_under_its_stored_id_never_twice_unknowingly(
    store_url: str, case: str, tmp_path: Path
) -> None:
    point, idempotent, after_kill, after_takeover, answered = CASES[case]
    await _run(store_url, point, "first", idempotent, tmp_path)
    assert len(_ledger(tmp_path)) == after_kill
    done = await _run(store_url, point, "resume", idempotent, tmp_path)
    lines = _ledger(tmp_path)
    assert len(lines) == after_takeover
    assert done == {"state": "completed", "text": "done: " + json.dumps(answered, sort_keys=True)}
    # one call, the model's first (its id names the killed process), one key on every run
    assert {(key, call_id) for key, _, call_id in lines} == {(lines[0][0], "pay-first")}
    assert [retried for _, retried, _ in lines] == ["False", "True"][: len(lines)]
    asked = [(replica, contents) for replica, contents in recorded(tmp_path / "requests.jsonl")]
    # the takeover asked the model nothing before pay's result: the stored call was run
    assert [(replica, texts_of(contents)) for replica, contents in asked] == [
        ("first", ["pay the bill"]),
        ("resume", ["pay the bill", "call:pay-first", "result:pay-first"]),
    ]
    assert _responses(asked[-1][1]) == [answered]
    async with open_url(store_url) as store:
        stored = await store.messages("s")
    assert transcript_problems(stored) == []
    assert [m.role for m in stored] == ["user", "assistant", "user", "assistant"]
    assert stored[-1].readable == done["text"]  # the answer is the last message


# -- in one process ------------------------------------------------------------------------


def _keys_tool(seen: list[ToolContext]) -> Any:
    @journaled
    async def pay(amount: int, context: ToolContext) -> dict[str, int]:
        """Pay ``amount``."""
        seen.append(context)
        return {"paid": amount}

    return pay


def _context(service: Any, session_id: str, call_id: str | None) -> AdkToolContext:
    """ADK's tool context of call ``call_id`` in a run of ``session_id`` (app a, user u)."""
    from google.adk.sessions.session import Session as AdkSession

    running = AdkSession(id=session_id, app_name="a", user_id="u")
    invocation = InvocationContext(session_service=service, invocation_id="i", session=running)
    return AdkToolContext(invocation, function_call_id=call_id)


async def test_the_key_is_stable_across_retries_and_distinct_across_calls_and_sessions() -> None:
    store = MemoryStore()
    service = SteerableSessionService(store)
    seen: list[ToolContext] = []
    tool = FunctionTool(_keys_tool(seen))
    for session_id, call_id in [("s1", "c1"), ("s1", "c2"), ("s2", "c1")]:
        result = await tool.run_async(
            args={"amount": 5}, tool_context=_context(service, session_id, call_id)
        )
        assert result == PAID
    # the same call again: its recorded result, the tool not run
    again = await tool.run_async(args={"amount": 5}, tool_context=_context(service, "s1", "c1"))
    assert again == PAID
    assert len(seen) == 3
    keys = [context.key for context in seen]
    assert len(set(keys)) == 3
    assert [(c.call.id, c.call.name, json.loads(c.call.arguments)) for c in seen] == [
        ("c1", "pay", {"amount": 5}),
        ("c2", "pay", {"amount": 5}),
        ("c1", "pay", {"amount": 5}),
    ]
    # a retry of a started call is given the same key (an idempotent tool runs it again)
    sid = service.session(app_name="a", user_id="u", session_id="s1").id
    retried: list[ToolContext] = []

    @journaled(idempotent=True)
    def book(slot: str, context: ToolContext) -> str:
        """Book ``slot``."""
        retried.append(context)
        return f"{slot}: booked"

    assert await Session(sid, store).begin_calls([_key_of(sid, "c3")]) == {}
    booked = await FunctionTool(book).run_async(
        args={"slot": "monday"}, tool_context=_context(service, "s1", "c3")
    )
    assert booked == "monday: booked"
    assert [(c.key, c.retried, c.session) for c in retried] == [(_key_of(sid, "c3"), True, sid)]


def _key_of(session: str, call_id: str) -> str:
    return call_key(session, "adk", call_id)


async def test_with_no_session_the_wrapped_tool_just_runs() -> None:
    seen: list[ToolContext] = []
    pay = _keys_tool(seen)
    # called by hand, outside ADK and any session
    assert await pay(amount=5) == PAID
    assert await pay(5) == PAID
    # in ADK over its own session service: nowhere to journal, each call runs
    tool = FunctionTool(pay)
    for _ in range(2):
        result = await tool.run_async(
            args={"amount": 5}, tool_context=_context(InMemorySessionService(), "s", "c1")
        )
        assert result == PAID
    assert len(seen) == 4
    assert all(c.session is None for c in seen)


async def test_the_wrapper_keeps_the_declaration_and_hides_the_steerable_context() -> None:
    async def pay(amount: int, memo: str = "") -> dict[str, int]:
        """Pay ``amount``."""
        return {"paid": amount}

    def with_context(amount: int, memo: str = "", *, context: ToolContext) -> dict[str, int]:
        """Pay ``amount``."""
        return {"paid": amount}

    with_context.__name__ = "pay"
    plain = FunctionTool(pay)._get_declaration()
    assert plain is not None
    for wrapped in (journaled(pay), journaled(idempotent=True)(pay), journaled(with_context)):
        declared = FunctionTool(wrapped)._get_declaration()
        assert declared is not None
        assert declared.model_dump() == plain.model_dump()
    assert journaled(pay).__doc__ == pay.__doc__


async def test_the_reply_is_stored_before_a_journaled_tool_runs_and_a_replay_returns_json() -> None:
    store = MemoryStore()
    service = SteerableSessionService(store)
    last: list[Message] = []

    @journaled
    async def pay(amount: int) -> list[str]:
        """Pay ``amount``."""
        box = service.session(app_name="a", user_id="u", session_id="s")
        last.extend((await store.messages(box.id))[-1:])
        return [f"paid {amount}"]

    model = ScriptedLlm(model="scripted", script=[call("pay", "c1", amount=5), say("done")])
    agent = LlmAgent(name="payer", model=model, tools=[pay])
    app = App(name="a", root_agent=agent, plugins=[SteeringPlugin(service)])
    runner = Runner(app=app, session_service=service)
    await service.create_session(app_name="a", user_id="u", session_id="s")
    prompt = types.Content(role="user", parts=[types.Part(text="pay")])
    async for _ in runner.run_async(user_id="u", session_id="s", new_message=prompt):
        pass
    await runner.close()
    # in the tool, the reply with its call was the last stored message
    assert [[(c.id, c.name) for c in m.tool_calls] for m in last] == [[("c1", "pay")]]
    assert texts_of(model.requests[-1])[-2:] == ["call:c1", "result:c1"]
    assert model.requests[-1][-1]["parts"][0]["function_response"]["response"] == {
        "result": ["paid 5"]
    }


@pytest.mark.filterwarnings(r"ignore:\[EXPERIMENTAL\] ResumabilityConfig:UserWarning")
async def test_replies_reusing_a_call_id_each_run_and_a_carried_on_turn_replays_its_own() -> None:
    # a server that numbers each reply's calls from call_0: two turns, both call pay as call_0
    store = MemoryStore()
    seen: list[ToolContext] = []
    pay = _keys_tool(seen)
    recorded_two = asyncio.Event()

    async def die_after_two(
        tool: Any, args: dict[str, Any], tool_context: AdkToolContext, tool_response: Any
    ) -> None:
        if args["amount"] == 2 and not recorded_two.is_set():
            recorded_two.set()  # the result is recorded; the process dies here
            await asyncio.Event().wait()

    def runner(script: list[Any], *, resumable: bool = False) -> tuple[Runner, ScriptedLlm]:
        service = SteerableSessionService(store)  # a fresh one, as in a fresh process
        model = ScriptedLlm(model="scripted", script=script)
        agent = LlmAgent(name="payer", model=model, tools=[pay], after_tool_callback=die_after_two)
        app = App(
            name="a",
            root_agent=agent,
            plugins=[SteeringPlugin(service)],
            resumability_config=ResumabilityConfig(is_resumable=True) if resumable else None,
        )
        return Runner(app=app, session_service=service), model

    async def run(runner: Runner, text: str | None, invocation: str | None = None) -> set[str]:
        prompt = None if text is None else types.Content(role="user", parts=[types.Part(text=text)])
        invocations: set[str] = set()
        async for event in runner.run_async(
            user_id="u", session_id="s", invocation_id=invocation, new_message=prompt
        ):
            invocations.add(event.invocation_id)
        return invocations

    first, first_model = runner([call("pay", "call_0", amount=1), say("paid one")])
    await first.session_service.create_session(app_name="a", user_id="u", session_id="s")
    await run(first, "pay 1")
    await first.close()
    second, _ = runner([call("pay", "call_0", amount=2), say("paid two")])
    dying = asyncio.create_task(run(second, "pay 2"))
    await asyncio.wait_for(recorded_two.wait(), 10)
    dying.cancel()  # as a SIGKILL: nothing more of the run is stored
    await asyncio.gather(dying, return_exceptions=True)
    # both calls ran, each under its own key: the second was not answered with the first's
    assert [(c.call.id, json.loads(c.call.arguments)) for c in seen] == [
        ("call_0", {"amount": 1}),
        ("call_0", {"amount": 2}),
    ]
    assert _responses(first_model.requests[-1]) == [{"paid": 1}]
    sid = SteerableSessionService(store).session(app_name="a", user_id="u", session_id="s").id
    stored = await store.messages(sid)
    replies = [m for m in stored if m.tool_calls]
    assert [[c.id for c in m.tool_calls] for m in replies] == [["call_0"], ["call_0"]]
    assert stored[-1] == replies[-1]  # the second turn died with its call unanswered
    # the key: the session, the framework, the stored reply's message id, the call id
    assert [c.key for c in seen] == [call_key(sid, f"adk/{m.id}", "call_0") for m in replies]
    # the second turn carried on, in a resumable App under its invocation: ADK runs the
    # stored call again and the journal answers it with ITS recorded result, not run
    crashed = _records.events_of(stored, "payer")[-1].invocation_id
    carry, carry_model = runner([say("paid two")], resumable=True)
    await run(carry, None, crashed)
    await carry.close()
    assert len(seen) == 2
    assert texts_of(carry_model.requests[0])[-2:] == ["call:call_0", "result:call_0"]
    assert _responses(carry_model.requests[0])[-1] == {"paid": 2}


async def test_over_adk_own_service_a_reused_call_id_is_keyed_by_the_reply_event() -> None:
    # the journal made current (journal_session), the events in ADK's own session service
    store = MemoryStore()
    seen: list[ToolContext] = []
    model = ScriptedLlm(
        model="scripted",
        script=[call("pay", "call_0", amount=1), say("one"), call("pay", "call_0", amount=2)],
    )
    agent = LlmAgent(name="payer", model=model, tools=[_keys_tool(seen)])
    service = InMemorySessionService()
    runner = Runner(app=App(name="a", root_agent=agent), session_service=service)
    await service.create_session(app_name="a", user_id="u", session_id="s")
    with journal_session(Session("journal", store)):
        for text in ("pay 1", "pay 2"):
            prompt = types.Content(role="user", parts=[types.Part(text=text)])
            async for _ in runner.run_async(user_id="u", session_id="s", new_message=prompt):
                pass
    await runner.close()
    adk = await service.get_session(app_name="a", user_id="u", session_id="s")
    assert adk is not None
    events = [e.id for e in adk.events if e.get_function_calls()]
    assert [json.loads(c.call.arguments) for c in seen] == [{"amount": 1}, {"amount": 2}]
    assert [c.key for c in seen] == [call_key("journal", f"adk/{e}", "call_0") for e in events]
