"""Tool calls in the store: read by steerable too, and never a call without its output.

A response's calls are one assistant message with a ToolCall view of each, their outputs one
user message with a ToolResult each, so ``transcript_problems`` checks what is stored. A call
that waits for approval (``needs_approval``) is kept back until its output comes: under the
service a turn cannot be resumed from a RunState, so it ends ``failed`` and stores no call.
"""

from __future__ import annotations

from agents import Agent, Runner, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from steerable import open_session, transcript_problems
from steerable.integrations.openai_agents import OpenAIAgentsAgent, SteerableSession, steering
from steerable.service import Service
from steerable.stores.memory import MemoryStore
from tests.integrations.openai_agents.support import item_problems, kinds, stored_items


@function_tool
async def look(q: str) -> str:
    """Look something up."""
    return f"found {q}"


@function_tool(needs_approval=True)
async def delete(q: str) -> str:
    """Delete something (a person approves it first)."""
    return f"deleted {q}"


async def test_parallel_calls_are_one_message_and_their_outputs_the_next() -> None:
    base = open_session("s", MemoryStore())
    model = ScriptedModel(
        [
            [
                function_call("look", {"q": "a"}, call_id="c1"),
                function_call("look", {"q": "b"}, call_id="c2"),
            ],
            [assistant_message("done")],
        ]
    )
    session = SteerableSession(base)
    agent = Agent(name="a", model=model, tools=[look])
    await Runner.run(agent, "hi", run_config=steering(session), session=session)
    stored = await base.messages()
    assert transcript_problems(stored) == []
    assert [(m.role, [c.id for c in m.tool_calls]) for m in stored][1] == (
        "assistant",
        ["c1", "c2"],
    )
    results = [(r.call_id, r.name, r.content) for r in stored[2].tool_results]
    assert results == [("c1", "look", "found a"), ("c2", "look", "found b")]
    # the records are what a run rebuilds, item for item
    assert kinds(stored_items(stored)) == [*kinds(model.calls[1].input), "message"]


async def test_under_the_service_a_call_to_approve_fails_the_turn_and_is_not_stored() -> None:
    model = ScriptedModel(
        [[function_call("delete", {"q": "x"}, call_id="c1")], [assistant_message("ok")]]
    )
    agent = OpenAIAgentsAgent(Agent(name="a", model=model, tools=[delete]))
    # error_detail: the agent's own reason is recorded (by default, a code and a safe line)
    service = Service(MemoryStore(), agent, poll=0.05, error_detail=True)
    async with service.serving():
        await service.send("s", "hi", id="p")
        first = await service.wait("s", "p", seconds=30)
        await service.send("s", "again", id="q")
        second = await service.wait("s", "q", seconds=30)
        stored = [e.message for e in await service.transcript("s")]
    assert first is not None and first.state == "failed"
    assert "tool approval" in (first.error or "")
    assert second is not None and (second.state, second.text) == ("completed", "ok")
    assert transcript_problems(stored) == []
    assert item_problems(model.calls[1].input) == []  # the next turn's request is valid
    assert kinds(stored_items(stored)) == ["user:hi", "user:again", "message"]


async def test_standalone_an_approved_call_is_stored_with_its_output_when_the_run_resumes() -> None:
    base = open_session("s", MemoryStore())
    model = ScriptedModel(
        [[function_call("delete", {"q": "x"}, call_id="c1")], [assistant_message("deleted")]]
    )
    session = SteerableSession(base)
    agent = Agent(name="a", model=model, tools=[delete])
    paused = await Runner.run(agent, "hi", run_config=steering(session), session=session)
    assert len(paused.interruptions) == 1
    assert transcript_problems(await base.messages()) == []  # the call waits, not stored
    state = paused.to_state()
    state.approve(paused.interruptions[0])
    await base.steer("thanks", id="k")
    done = await Runner.run(agent, state, run_config=steering(session), session=session)
    assert done.final_output == "deleted"
    stored = await base.messages()
    assert transcript_problems(stored) == []
    items = stored_items(stored)
    assert item_problems(items) == []
    assert kinds(items) == [
        "user:hi",
        "function_call",
        "function_call_output",
        "user:thanks",
        "message",
    ]
