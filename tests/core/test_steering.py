"""Where a steer joins a run: at the next step, after the tool results, once."""

from __future__ import annotations

import asyncio

import pytest

from steerable import (
    Message,
    ModelRequest,
    Run,
    Runner,
    ScriptedModel,
    Spec,
    Steer,
    UsageError,
    open_session,
    transcript_problems,
)
from steerable.models.scripted import call
from steerable.stores.memory import MemoryStore


def positions(request: ModelRequest, text: str) -> list[int]:
    return [i for i, m in enumerate(request.messages) if m.steered and m.text == text]


async def test_a_steer_sent_during_a_tool_call_reaches_the_next_request_once() -> None:
    holder: list[Run] = []

    async def lookup(q: str) -> str:
        """Look something up."""
        if q == "a":
            holder[0].steer("use celsius")
        return f"result for {q}"

    model = ScriptedModel(
        [call("lookup", '{"q": "a"}'), call("lookup", '{"q": "b"}'), "done in celsius"]
    )
    holder.append(Runner.start(Spec(tools=[lookup]), "weather?", model))
    result = await holder[0]

    first, second, third = model.requests
    assert positions(first, "use celsius") == []
    # right after the tool's result, in the very next request
    (at,) = positions(second, "use celsius")
    assert second.messages[at - 1].tool_results
    assert second.messages[at - 2].tool_calls
    assert at == len(second.messages) - 1
    # it stays in place in every later request, taken once
    assert positions(third, "use celsius") == [at]
    assert len(third.messages) == at + 3
    assert [m.text for m in result.steers] == ["use celsius"]
    assert result.unapplied_steers == ()
    assert transcript_problems(result.transcript) == []


async def test_a_steer_is_never_placed_between_a_tool_call_and_its_result() -> None:
    holder: list[Run] = []
    started = asyncio.Event()

    async def slow(n: int) -> str:
        """Take a while."""
        started.set()
        await asyncio.sleep(0.02)
        return str(n)

    async def steer_while_tools_run() -> None:
        await started.wait()
        holder[0].steer("first")
        holder[0].steer("second")

    model = ScriptedModel([[call("slow", '{"n": 1}'), call("slow", '{"n": 2}')], "ok"])
    holder.append(Runner.start(Spec(tools=[slow]), "go", model))
    await steer_while_tools_run()
    result = await holder[0]

    last = model.requests[-1].messages
    roles = [(m.role, bool(m.tool_calls), bool(m.tool_results), m.steered) for m in last]
    assert roles == [
        ("user", False, False, False),
        ("assistant", True, False, False),
        ("user", False, True, False),
        ("user", False, False, True),
        ("user", False, False, True),
    ]
    assert [m.text for m in last[3:]] == ["first", "second"]
    assert transcript_problems(result.transcript) == []


async def test_a_steer_sent_while_the_final_answer_is_written_is_unapplied_without_a_session() -> (
    None
):
    holder: list[Run] = []

    def answer(request: ModelRequest) -> str:
        holder[0].steer("too late")
        return "the answer"

    model = ScriptedModel([answer])
    holder.append(Runner.start(Spec(), "question", model))
    result = await holder[0]

    assert result.reason == "completed"
    assert all(not m.steered for m in result.transcript)
    assert [s.text for s in result.unapplied_steers] == ["too late"]


async def test_a_steer_left_in_the_session_during_the_final_answer_is_taken_first_next_run() -> (
    None
):
    session = open_session("s", MemoryStore())

    async def answer(request: ModelRequest) -> str:
        await session.steer("too late for this turn")
        return "the answer"

    first = await Runner.run(Spec(session=session), "question", ScriptedModel([answer]))
    assert all(not m.steered for m in first.transcript)
    assert [s.text for s in await session.steers()] == ["too late for this turn"]

    model = ScriptedModel(["answered the steer"])
    messages = [*await session.messages(), Message("user", (), id="x")][:-1]
    second = await Runner.run(Spec(session=session), messages, model)
    (request,) = model.requests
    assert request.messages[-1].text == "too late for this turn"
    assert request.messages[-1].steered
    assert second.output == "answered the steer"
    assert await session.steers() == []


async def test_an_in_memory_steer_left_over_with_a_session_waits_in_its_store() -> None:
    session = open_session("s", MemoryStore())
    holder: list[Run] = []

    def answer(request: ModelRequest) -> str:
        holder[0].steer("left over", id="steer-9")
        return "the answer"

    holder.append(Runner.start(Spec(session=session), "q", ScriptedModel([answer])))
    result = await holder[0]
    assert [s.id for s in result.unapplied_steers] == ["steer-9"]
    assert [s.id for s in await session.steers()] == ["steer-9"]


async def test_a_steer_left_in_the_store_before_the_run_is_in_its_first_request() -> None:
    session = open_session("s", MemoryStore())
    await session.steer("left before any run", id="early")
    model = ScriptedModel(["ok"])
    result = await Runner.run(Spec(session=session), "hello", model)

    (request,) = model.requests
    assert [m.text for m in request.messages] == ["hello", "left before any run"]
    assert request.messages[1].steered and request.messages[1].id == "early"
    assert [m.id for m in result.steers] == ["early"]
    stored = await session.messages()
    assert [m.text for m in stored] == ["hello", "left before any run", "ok"]


async def test_steers_per_turn_caps_what_one_run_takes() -> None:
    session = open_session("s", MemoryStore())
    for i in range(5):
        await session.steer(f"s{i}")
    model = ScriptedModel([call("noop"), "done"])

    def noop() -> str:
        return "ok"

    result = await Runner.run(Spec(session=session, tools=[noop], steers_per_turn=3), "go", model)
    assert [m.text for m in result.steers] == ["s0", "s1", "s2"]
    assert [s.text for s in await session.steers()] == ["s3", "s4"]


async def test_the_run_box_comes_before_the_session_store_at_a_step() -> None:
    session = open_session("s", MemoryStore())
    holder: list[Run] = []

    async def tool() -> str:
        await session.steer("from the store")
        holder[0].steer("from the run")
        return "ok"

    model = ScriptedModel([call("tool"), "done"])
    holder.append(Runner.start(Spec(session=session, tools=[tool]), "go", model))
    result = await holder[0]
    assert [m.text for m in result.steers] == ["from the run", "from the store"]
    stored = await session.messages()
    assert [m.text for m in stored][-3:] == ["from the run", "from the store", "done"]


async def test_a_steer_id_given_twice_to_a_run_is_one_steer() -> None:
    holder: list[Run] = []

    def tool() -> str:
        holder[0].steer("once", id="same")
        holder[0].steer("once again", id="same")
        return "ok"

    model = ScriptedModel([call("tool"), "done"])
    holder.append(Runner.start(Spec(tools=[tool]), "go", model))
    result = await holder[0]
    assert [m.text for m in result.steers] == ["once"]


async def test_a_steer_id_given_again_after_the_run_took_it_from_its_box_is_ignored() -> None:
    holder: list[Run] = []

    def tool() -> str:
        first = holder[0].steer("once", id="retried")
        assert holder[0].steer("a retry", id="retried") is first
        return "ok"

    model = ScriptedModel([call("tool"), call("tool"), "done"])
    holder.append(Runner.start(Spec(tools=[tool]), "go", model))
    result = await holder[0]
    assert result.reason == "completed"
    assert [m.id for m in result.steers] == ["retried"]
    assert [m.id for m in result.transcript].count("retried") == 1
    assert transcript_problems(result.transcript) == []


async def test_a_steer_id_the_run_took_with_a_session_is_ignored_when_given_again() -> None:
    store = MemoryStore()
    session = open_session("s", store)
    await session.steer("from the store", id="via-store")
    holder: list[Run] = []
    calls = 0

    def tool() -> str:
        nonlocal calls
        calls += 1
        if calls == 1:
            holder[0].steer("from the box", id="via-box")
        else:  # a client that retries both, after the run took them
            holder[0].steer("from the box", id="via-box")
            holder[0].steer("from the store", id="via-store")
        return "ok"

    model = ScriptedModel([call("tool"), call("tool"), "done"])
    holder.append(Runner.start(Spec(tools=[tool], session=session), "go", model))
    result = await holder[0]
    assert result.reason == "completed", result.error
    assert sorted(m.id for m in result.steers) == ["via-box", "via-store"]
    assert result.unapplied_steers == ()
    ids = [m.id for m in await store.messages("s")]
    assert ids.count("via-box") == 1 and ids.count("via-store") == 1


async def test_a_steered_message_in_the_transcript_given_is_a_seen_id() -> None:
    holder: list[Run] = []

    def answer(request: ModelRequest) -> str:
        holder[0].steer("use celsius", id="given")  # a retry of a steer already recorded
        return "ok"

    messages = [Steer("use celsius", "given").message()]
    holder.append(Runner.start(Spec(), messages, ScriptedModel([answer])))
    result = await holder[0]
    assert result.unapplied_steers == ()
    assert [m.id for m in result.transcript].count("given") == 1


async def test_an_empty_steer_id_is_refused_by_a_run_as_by_a_session() -> None:
    """Not silently a fresh id: a client's retries with it would become two steers."""
    entered, release = asyncio.Event(), asyncio.Event()

    async def tool() -> str:
        entered.set()
        await release.wait()
        return "ok"

    run = Runner.start(Spec(tools=[tool]), "go", ScriptedModel([call("tool"), "done"]))
    await entered.wait()
    with pytest.raises(UsageError, match="non-empty"):
        run.steer("x", id="")
    with pytest.raises(UsageError, match="non-empty"):
        await open_session("s", MemoryStore()).steer("x", id="")
    release.set()
    assert (await run).steers == ()
