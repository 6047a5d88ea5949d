"""Journaled SDK tools: each call runs once across a SIGKILL, keyed by the model's call id
and the id of the stored message holding the reply that made it.

``journal_run.py`` runs a steered run whose model calls ``pay`` (``@function_tool`` over
``@journaled``), a tool whose effect is a line in a ledger file, and kills itself at one point;
a fresh process carries the run on the documented way (``Runner.run(agent, [], ...)``). The
reply is stored before the tool runs, so the resumed run's first request already holds the
same call (``call-pay``) with its output, under the same key: the model is never asked for
it again. The other tests run in process: the key, the schema, the outputs, no session, a
call id two replies share, the service's turn.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, FunctionTool, RunHooks, Runner, ToolOutputImage, function_tool
from agents.exceptions import AgentsException
from agents.testing import ScriptedModel, assistant_message, function_call
from agents.tool_context import ToolContext as SDKToolContext

from steerable import Message, Store, open_session, transcript_problems
from steerable.integrations._journal import journal_session
from steerable.integrations.openai_agents import (
    OpenAIAgentsAgent,
    SteerableSession,
    journal_hooks,
    journaled,
    steering,
)
from steerable.journal import UNKNOWN, ToolContext, call_key
from steerable.service import Service
from steerable.service_store import ServiceStore
from tests.integrations.openai_agents.support import item_problems, kinds, stored_items
from tests.ledger import ledger_lines, run_worker


def reply_keys(session: str, messages: list[Message], call_id: str) -> list[str]:
    """The journal key of call ``call_id`` of each stored reply that made one, in order: the
    key holds the id of the stored message holding the call."""
    return [
        call_key(session, f"openai_agents/{m.id}", call_id)
        for m in messages
        if any(c.id == call_id for c in m.tool_calls)
    ]


async def _worker(url: str, point: str, role: str, idempotent: bool, ledger: Path) -> Any:
    args = ("-m", "tests.integrations.openai_agents.journal_run", url, point, role)
    return await run_worker(
        (*args, "yes" if idempotent else "no", str(ledger)), killed=role == "first"
    )


def _lines(ledger: Path) -> list[list[str]]:
    return ledger_lines(ledger)


# point, idempotent: (key, retried) of the ledger lines after the resume, the output the
# resumed request carries
CASES = {
    "interrupted": ("in-tool", False, ["False"], UNKNOWN),
    "interrupted, idempotent": ("in-tool", True, ["False", "True"], "paid 5"),
    "recorded": ("after-end", False, ["False"], "paid 5"),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_a_journaled_call_killed_by_sigkill_is_carried_on_under_its_own_call_id(
    store_url: str, store: Store, case: str, tmp_path: Path
) -> None:
    point, idempotent, retried_after, output = CASES[case]
    ledger = tmp_path / "ledger"
    await _worker(store_url, point, "first", idempotent, ledger)
    # the reply is stored before the call ran: the transcript ends with the pending call,
    # and the call's key holds that stored message's id
    before = await open_session("j", store).messages()
    assert kinds(stored_items(before)) == ["user:pay", "function_call"]
    [key] = reply_keys("j", before, "call-pay")
    assert _lines(ledger) == [[key, "False"]]  # the effect happened once before the kill
    resumed = await _worker(store_url, point, "resume", idempotent, ledger)
    # carried on under the same key: the same stored reply's id
    assert _lines(ledger) == [[key, retried] for retried in retried_after]
    assert resumed["output"] == f"done: {output}"
    # one request: the stored call carried on (not asked again), its output right after it
    [request] = resumed["inputs"]
    assert kinds(request) == ["user:pay", "function_call", "function_call_output"]
    assert [i.get("call_id") for i in request[1:]] == ["call-pay", "call-pay"]
    assert request[2]["output"] == output
    stored = await open_session("j", store).messages()
    assert transcript_problems(stored) == []
    items = stored_items(stored)
    assert item_problems(items) == []
    assert kinds(items) == ["user:pay", "function_call", "function_call_output", "message"]
    assert items[2]["output"] == output


# -- in process ---------------------------------------------------------------------------


def _context(call_id: str, arguments: str = "{}", name: str = "pay") -> SDKToolContext[Any]:
    return SDKToolContext(None, tool_name=name, tool_call_id=call_id, tool_arguments=arguments)


async def test_the_key_is_stable_across_retries_and_distinct_across_calls_and_sessions(
    store: Store,
) -> None:
    seen: list[tuple[str, bool, str | None]] = []
    fail = [True]

    @function_tool
    @journaled(idempotent=True)
    async def pay(amount: int, context: ToolContext) -> str:
        """Pay ``amount``."""
        seen.append((context.key, context.retried, context.session))
        if fail.pop() if fail else False:
            raise RuntimeError("the process stops here")
        return f"paid {amount}"

    async def call(session: str, call_id: str) -> Any:
        with journal_session(open_session(session, store)):
            return await pay.on_invoke_tool(_context(call_id, '{"amount": 5}'), '{"amount": 5}')

    failed = await call("a", "c1")  # raised: the call stays started, nothing recorded
    assert failed.startswith("An error occurred while running the tool")  # the SDK's words
    assert await call("a", "c1") == "paid 5"  # retried (idempotent), the same key
    assert await call("a", "c1") == "paid 5"  # recorded: replayed, not run
    assert await call("a", "c2") == "paid 5"
    assert await call("b", "c1") == "paid 5"
    a1 = call_key("a", "openai_agents", "c1")
    assert seen == [
        (a1, False, "a"),
        (a1, True, "a"),
        (call_key("a", "openai_agents", "c2"), False, "a"),
        (call_key("b", "openai_agents", "c1"), False, "b"),
    ]
    assert len({key for key, _, _ in seen}) == 3


async def test_with_no_session_the_wrapped_tool_just_runs() -> None:
    seen: list[ToolContext] = []

    @function_tool
    @journaled
    def pay(amount: int, context: ToolContext) -> str:
        """Pay ``amount``."""
        seen.append(context)
        return f"paid {amount}"

    model = ScriptedModel(
        [
            [function_call("pay", {"amount": 5}, call_id="c1")],
            [function_call("pay", {"amount": 6}, call_id="c2")],
            [assistant_message("done")],
        ]
    )
    result = await Runner.run(Agent(name="a", model=model, tools=[pay]), "pay")
    assert result.final_output == "done"
    assert [(c.key, c.session, c.retried) for c in seen] == [
        (call_key(None, "openai_agents", "c1"), None, False),
        (call_key(None, "openai_agents", "c2"), None, False),
    ]
    assert [i["output"] for i in model.calls[2].input if i.get("type", "").endswith("output")] == [
        "paid 5",
        "paid 6",
    ]


def test_the_sdk_builds_the_same_tool_as_without_journaled() -> None:
    async def plain(ctx: SDKToolContext[Any], amount: int, note: str = "") -> str:
        """Pay ``amount``.

        Args:
            amount: How much.
            note: What for.
        """
        return ""

    async def mine(amount: int, context: ToolContext, note: str = "") -> str:
        """Pay ``amount``.

        Args:
            amount: How much.
            note: What for.
        """
        return ""

    expected = function_tool(plain, name_override="pay")
    for tool in (
        function_tool(journaled(mine), name_override="pay"),
        function_tool(journaled(plain), name_override="pay"),
    ):
        assert isinstance(tool, FunctionTool)
        assert tool.params_json_schema == expected.params_json_schema
        assert tool.description == expected.description == "Pay ``amount``."
    assert journaled(mine).__name__ == "mine"
    with pytest.raises(Exception, match="under @function_tool"):
        journaled(expected)  # type: ignore[call-overload]


async def test_an_output_that_is_not_text_is_recorded_as_the_sdk_sends_it_and_replayed(
    store: Store,
) -> None:
    runs: list[str] = []

    @function_tool
    @journaled
    async def picture(which: str) -> Any:
        """A picture, or a dict."""
        runs.append(which)
        if which == "image":
            return ToolOutputImage(image_url="https://example.com/a.png")
        return {"size": 3}

    session = open_session("s", store)
    outputs = []
    for which in ("image", "image", "dict", "dict"):  # each call twice: run, then replayed
        arguments = json.dumps({"which": which})
        with journal_session(session):
            outputs.append(await picture.on_invoke_tool(_context(which, arguments), arguments))
    assert runs == ["image", "dict"]
    image = [{"type": "input_image", "image_url": "https://example.com/a.png"}]
    assert outputs == [image, image, "{'size': 3}", "{'size': 3}"]  # the SDK's str() of a dict
    recorded = await session.begin_calls([call_key("s", "openai_agents", "image")])
    result = recorded[call_key("s", "openai_agents", "image")]
    assert result is not None and json.loads(result.content) == image


async def test_the_reply_is_stored_before_a_journaled_call_runs_and_not_before_a_plain_one(
    store: Store,
) -> None:
    at_call: dict[str, list[str]] = {}

    async def kinds_stored() -> list[str]:
        return kinds(stored_items(await open_session("s", store).messages()))

    @function_tool
    @journaled
    async def pay(amount: int) -> str:
        """Pay ``amount``."""
        at_call["pay"] = await kinds_stored()
        return "paid"

    @function_tool
    async def look() -> str:
        """Look."""
        at_call["look"] = await kinds_stored()
        return "seen"

    model = ScriptedModel(
        [
            [function_call("look", {}, call_id="c0")],
            [
                function_call("pay", {"amount": 1}, call_id="c1"),
                function_call("pay", {"amount": 2}, call_id="c2"),
            ],
            [assistant_message("done")],
        ]
    )
    session = SteerableSession(open_session("s", store))
    agent = Agent(name="a", model=model, tools=[pay, look])
    result = await Runner.run(
        agent, "go", session=session, run_config=steering(session), hooks=journal_hooks(session)
    )
    assert result.final_output == "done"
    assert at_call["look"] == ["user:go"]  # a plain call: its reply waits for the next step
    # both calls of the reply stored, once, before either ran
    assert at_call["pay"] == [
        "user:go",
        "function_call",
        "function_call_output",
        "function_call",
        "function_call",
    ]
    stored = await open_session("s", store).messages()
    assert transcript_problems(stored) == []
    assert kinds(stored_items(stored)) == [
        *at_call["pay"],
        "function_call_output",
        "function_call_output",
        "message",
    ]
    assert [kinds(c.input) for c in model.calls][2] == kinds(stored_items(stored))[:-1]


async def test_a_steered_run_without_journal_hooks_does_not_run_a_journaled_tool(
    store: Store,
) -> None:
    runs: list[int] = []

    @function_tool
    @journaled
    async def pay(amount: int) -> str:
        """Pay ``amount``."""
        runs.append(amount)
        return "paid"

    model = ScriptedModel(
        [[function_call("pay", {"amount": 1}, call_id="c1")], [assistant_message("done")]]
    )
    session = SteerableSession(open_session("s", store))
    agent = Agent(name="a", model=model, tools=[pay])
    await Runner.run(agent, "go", session=session, run_config=steering(session))
    assert runs == []  # refused before it ran: the SDK tells the model the tool failed
    [output] = [i for i in model.calls[1].input if i.get("type") == "function_call_output"]
    assert output["output"].startswith("An error occurred while running the tool")


class _StopAfterTheTool(RunHooks[Any]):
    """Ends the run as the tool ends (its result recorded, nothing stored after): a crash."""

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
        raise _Crash


class _Crash(AgentsException):
    """(An SDK exception: the SDK raises it as it is, not wrapped.)"""

    def __init__(self) -> None:
        super().__init__("crash")


async def test_two_replies_sharing_a_call_id_each_run_their_call_under_its_own_key(
    store: Store,
) -> None:
    # a server that numbers each reply's calls from call_0: two turns, each a call_0
    seen: list[tuple[int, str]] = []

    @function_tool
    @journaled
    async def pay(amount: int, context: ToolContext) -> str:
        """Pay ``amount``."""
        seen.append((amount, context.key))
        return f"paid {amount}"

    model = ScriptedModel(
        [
            [function_call("pay", {"amount": 1}, call_id="call_0")],
            [assistant_message("paid 1")],
            [function_call("pay", {"amount": 2}, call_id="call_0")],
            # (the second turn crashes after its call; the carried-on run answers)
            [assistant_message("paid 2")],
        ]
    )
    agent = Agent(name="a", model=model, tools=[pay])
    session = SteerableSession(open_session("s", store))
    options: dict[str, Any] = {"session": session, "run_config": steering(session)}
    first = await Runner.run(agent, "one", hooks=journal_hooks(session), **options)
    assert first.final_output == "paid 1"
    with pytest.raises(_Crash):
        await Runner.run(agent, "two", hooks=journal_hooks(session, _StopAfterTheTool()), **options)
    stored = await open_session("s", store).messages()
    keys = reply_keys("s", stored, "call_0")
    assert seen == [(1, keys[0]), (2, keys[1])]  # both ran, each under its own reply's key
    assert keys[0] != keys[1]
    assert kinds(stored_items(stored))[-2:] == ["user:two", "function_call"]

    # a fresh process carries the second turn on: its own call's result, not the first's
    session = SteerableSession(open_session("s", store))
    options = {"session": session, "run_config": steering(session)}
    carried = await Runner.run(agent, [], hooks=journal_hooks(session), **options)
    assert carried.final_output == "paid 2"
    assert len(seen) == 2  # replayed from the journal, not run again
    # the carried-on call's output, in the request (the SDK keeps one item per call id in
    # what it sends: the latest) and stored after the second reply
    [*_, request] = model.calls
    [output] = [i for i in request.input if i.get("type") == "function_call_output"]
    assert output["output"] == "paid 2"
    stored = await open_session("s", store).messages()
    assert transcript_problems(stored) == []
    assert item_problems(stored_items(stored)) == []
    assert reply_keys("s", stored, "call_0") == keys
    outputs = [i["output"] for i in stored_items(stored) if i.get("type") == "function_call_output"]
    assert outputs == ["paid 1", "paid 2"]
    for key, paid in zip(keys, ("paid 1", "paid 2"), strict=True):
        result = (await open_session("s", store).begin_calls([key]))[key]
        assert result is not None and result.content == paid


async def test_under_the_service_a_turn_journals_its_calls_and_stores_the_reply_first(
    store: Store,
) -> None:
    seen: list[tuple[str, list[str]]] = []

    @function_tool
    @journaled
    async def pay(amount: int, context: ToolContext) -> str:
        """Pay ``amount``."""
        stored = await open_session("s", store).messages()
        seen.append((context.key, kinds(stored_items(stored))))
        return "paid"

    model = ScriptedModel(
        [[function_call("pay", {"amount": 1}, call_id="c1")], [assistant_message("done")]]
    )
    assert isinstance(store, ServiceStore)
    service = Service(store, OpenAIAgentsAgent(Agent(name="a", model=model, tools=[pay])))
    async with service.serving():
        await service.send("s", "go", id="p")
        done = await service.wait("s", "p", seconds=30)
    assert done is not None and (done.state, done.text) == ("completed", "done")
    stored = await open_session("s", store).messages()
    assert seen == [(*reply_keys("s", stored, "c1"), ["user:go", "function_call"])]
    recorded = await open_session("s", store).begin_calls([seen[0][0]])
    result = recorded[seen[0][0]]
    assert result is not None and result.content == "paid"
