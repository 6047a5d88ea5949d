"""The engine in one process over the memory store: turns, steers at steps, the cap, stop.

Each test runs replicas as :class:`Service` objects of one process over one store; the
process tests (``test_replicas.py``) do the same with real processes and databases.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from steerable.messages import Message, Native
from steerable.models.base import ModelRequest
from steerable.models.scripted import ScriptedModel, call
from steerable.service import Service, Turn
from steerable.service.agent import ReActAgent
from steerable.service.demo import demo_agent
from steerable.service_store import Outcome
from steerable.spec import Spec
from steerable.stores.memory import MemoryStore
from steerable.tools import tool


async def _until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    for _ in range(2000):
        if await check():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"never: {what}")


def _texts(messages: list[Message] | tuple[Message, ...]) -> list[str]:
    return [m.text or ("<tool result>" if m.tool_results else "<call>") for m in messages]


class Recorder:
    """The model requests of a test, and an event set once a tool call is under way."""

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []

    def __call__(self, request: ModelRequest) -> None:
        self.requests.append(request)


async def test_a_send_runs_one_turn_to_its_answer() -> None:
    store, seen = MemoryStore(), Recorder()
    service = Service(store, demo_agent(seconds=0.01, record=seen), poll=0.05)
    async with service.serving():
        accepted = await service.send("s", "plan my week")
        assert (accepted.turn, accepted.ahead) == (None, 0)
        done = await service.wait("s", accepted.id, seconds=10)
    assert done is not None and done.state == "completed"
    assert done.text == "answered: plan my week"
    assert _texts([e.message for e in await service.transcript("s")]) == [
        "plan my week",
        "<call>",
        "<tool result>",
        "answered: plan my week",
    ]
    assert len(seen.requests) == 2


async def test_a_steer_during_a_tool_call_is_in_the_next_request_after_the_result() -> None:
    store, seen = MemoryStore(), Recorder()
    service = Service(store, demo_agent(seconds=0.3, record=seen), poll=0.05)
    async with service.serving():
        first = await service.send("s", "plan my week")
        await _until(lambda: _has(seen, 1), "the first request")
        await asyncio.sleep(0.05)  # the tool is running
        steer = await service.steer("s", "skip friday")
        assert steer.turn == first.id
        done = await service.wait("s", first.id, seconds=10)
    assert done is not None and done.text == "answered: plan my week | skip friday"
    second = seen.requests[1].messages
    assert _texts(list(second))[-2:] == ["<tool result>", "skip friday"]
    assert [m.id for m in second].count(steer.id) == 1 and second[-1].steered
    fate = await service.input("s", steer.id)
    assert fate is not None and (fate.state, fate.turn, fate.step) == ("taken", first.id, 2)


async def _has(seen: Recorder, count: int) -> bool:
    return len(seen.requests) >= count


async def test_a_steer_during_the_final_answer_is_the_next_turn_before_a_later_send() -> None:
    store, seen = MemoryStore(), Recorder()
    gate, answering = asyncio.Event(), asyncio.Event()
    agent = demo_agent(seconds=0.01, record=seen)
    model = agent.model_for("s")
    original = model.stream

    async def slow_answer(request: ModelRequest):  # type: ignore[no-untyped-def]
        if request.messages[-1].tool_results and not gate.is_set():
            answering.set()  # the model "writes" the final answer until the gate opens
            await gate.wait()
        async for event in original(request):
            yield event

    model.stream = slow_answer  # type: ignore[method-assign]
    service = Service(store, agent, poll=0.05)
    async with service.serving():
        first = await service.send("s", "one")
        await answering.wait()
        late = await service.steer("s", "too late")
        later = await service.send("s", "after")
        assert late.turn == first.id
        gate.set()
        await service.wait("s", later.id, seconds=10)
        turns = [await service.turn("s", i) for i in (first.id, late.id, later.id)]
    assert [t.text for t in turns if t] == [
        "answered: one",
        "answered: too late",
        "answered: after",
    ]
    events = [e for e in await service.events("s", after=0, limit=500) if e.kind == "turn_started"]
    assert [e.turn for e in events] == [first.id, late.id, later.id]


async def test_past_the_cap_a_steer_is_a_turn_of_its_own() -> None:
    store = MemoryStore()
    service = Service(store, demo_agent(seconds=0.3, steers_per_turn=2), poll=0.05)
    async with service.serving():
        first = await service.send("s", "go")
        await _until(lambda: _running(service), "the turn")
        answers = [await service.steer("s", f"s{i}") for i in range(3)]
        assert [a.turn for a in answers] == [first.id, first.id, None]
        await service.wait("s", answers[2].id, seconds=10)
        done = await service.turn("s", first.id)
        own = await service.turn("s", answers[2].id)
    assert done is not None and done.text == "answered: go | s0 | s1"
    assert own is not None and own.text == "answered: s2"


async def _running(service: Service) -> bool:
    return (await service.status("s")).turn is not None


async def test_with_no_turn_running_a_steer_starts_one() -> None:
    service = Service(MemoryStore(), demo_agent(seconds=0.01), poll=0.05)
    async with service.serving():
        steer = await service.steer("s", "hello")
        assert steer.turn is None
        done = await service.wait("s", steer.id, seconds=10)
    assert done is not None and done.text == "answered: hello"


async def test_a_stop_from_another_replica_stops_the_turn_and_frees_its_untaken_steers() -> None:
    store = MemoryStore()
    runner = Service(store, demo_agent(seconds=1.0), poll=0.05, replica="a")
    other = Service(store, replica="c")
    async with runner.serving():
        first = await other.send("s", "go")
        await _until(lambda: _running(other), "the turn")
        await asyncio.sleep(0.05)
        steer = await other.steer("s", "not taken")
        assert await other.stop("s") == first.id
        done = await other.wait("s", first.id, seconds=10)
        assert done is not None and done.state == "stopped"
        own = await other.wait("s", steer.id, seconds=10)
    assert own is not None and own.state == "completed" and own.text == "answered: not taken"


async def test_the_same_send_id_through_two_replicas_is_one_turn() -> None:
    store = MemoryStore()
    a = Service(store, demo_agent(seconds=0.01), poll=0.05, replica="a")
    b = Service(store, demo_agent(seconds=0.01), poll=0.05, replica="b")
    async with a.serving(), b.serving():
        one, two = await asyncio.gather(a.send("s", "hi", id="x"), b.send("s", "hi", id="x"))
        assert sorted([one.duplicate, two.duplicate]) == [False, True]
        await a.wait("s", "x", seconds=10)
    started = [e for e in await a.events("s", after=0, limit=100) if e.kind == "turn_started"]
    assert len(started) == 1


async def test_a_replica_that_dies_mid_tool_is_carried_on_by_another() -> None:
    store = MemoryStore()
    dying = Service(store, demo_agent(seconds=30), poll=0.05, replica="a", lease=0.5)
    rescuer = Service(store, demo_agent(seconds=0.01), poll=0.05, replica="b", lease=0.5)
    async with dying.serving():
        first = await dying.send("s", "go")
        await _until(lambda: _tool_result_pending(store), "the tool call")
    # a's tasks are gone without a word: its lease runs out
    async with rescuer.serving() as replica:
        done = await rescuer.wait("s", first.id, seconds=10)
    assert done is not None and done.state == "completed" and done.epoch == 2
    assert replica.counters.resumed == 1
    messages = await store.messages("s")
    assert [m.id for m in messages].count(first.id) == 1
    # the abandoned run wrote nothing more: b redid the call that was under way
    assert _texts(messages) == ["go", "<call>", "<tool result>", "answered: go"]
    assert messages[2].tool_results[0].content == "step 1 done"


async def _tool_result_pending(store: MemoryStore) -> bool:
    status = await store.status("s")
    return status.turn is not None and status.turn.steps >= 1


async def test_bad_input_is_a_usage_error_and_an_unknown_session_is_empty() -> None:
    from steerable.errors import UsageError

    service = Service(MemoryStore())
    with pytest.raises(UsageError):
        await service.send("s", "")
    with pytest.raises(UsageError):
        await service.steer("s", "x", id=7)  # type: ignore[arg-type]
    with pytest.raises(UsageError):
        await service.send("", "x")
    status = await service.status("nobody")
    assert (status.turn, status.waiting, status.queued) == (None, [], 0)


class _Flaky(MemoryStore):
    """A memory store whose ``fail``-th step fails: before writing, or after (answer lost)."""

    def __init__(self, fail: int, *, after_writing: bool) -> None:
        super().__init__()
        self.fail, self.after_writing, self.steps = fail, after_writing, 0

    async def step(self, lease, messages, *, at, take, final=False):  # type: ignore[no-untyped-def]
        from steerable.errors import StoreUnavailable

        self.steps += 1
        if self.steps != self.fail:
            return await super().step(lease, messages, at=at, take=take, final=final)
        if self.after_writing:
            await super().step(lease, messages, at=at, take=take, final=final)
        raise StoreUnavailable("the line to the database went down")


@pytest.mark.parametrize("after_writing", [False, True], ids=["before-write", "answer-lost"])
async def test_a_store_outage_mid_turn_is_carried_on_with_nothing_twice(
    after_writing: bool,
) -> None:
    store = _Flaky(1, after_writing=after_writing)  # the tool's step (the claim made the first)
    service = Service(store, demo_agent(seconds=0.01), poll=0.05)
    async with service.serving() as replica:
        first = await service.send("s", "go")
        steer_sent = await service.steer("s", "and this")
        done = await service.wait("s", first.id, seconds=10)
    assert done is not None and done.state == "completed"
    messages = await store.messages("s")
    ids = [m.id for m in messages]
    assert ids.count(first.id) == 1 and len(ids) == len(set(ids))
    from steerable.messages import transcript_problems

    assert transcript_problems(messages) == []
    assert replica.counters.store_errors >= 1 and replica.counters.ended >= 1
    fate = await service.input("s", steer_sent.id)
    assert fate is not None and fate.state in ("taken", "prompt")
    started = [e for e in await service.events("s", after=0, limit=500) if e.kind == "turn_ended"]
    assert len([e for e in started if e.turn == first.id]) == 1


class _EndLost(MemoryStore):
    """A memory store whose ``end_turn`` never reaches it for the holder ``loser``; it takes
    no ``last``, so the answer is saved by a step of its own, before the end."""

    async def end_turn(self, lease, outcome):  # type: ignore[no-untyped-def,override]
        from steerable.errors import StoreUnavailable

        if lease.holder == "loser":
            raise StoreUnavailable("the end never arrived")
        return await super().end_turn(lease, outcome)


async def test_a_turn_answered_but_not_recorded_ended_is_recorded_by_the_next_holder() -> None:
    store, seen = _EndLost(), Recorder()
    loser = Service(store, demo_agent(seconds=0.01), replica="loser", lease=0.4, poll=0.05)  # type: ignore[arg-type]
    async with loser.serving() as first_replica:
        sent = await loser.send("s", "go")
        await _until(lambda: _answered(store), "the answer saved")
        await _until(lambda: _idle(first_replica), "the loser giving up on the end")
    heir = Service(store, demo_agent(seconds=0.01, record=seen), replica="heir", poll=0.05)  # type: ignore[arg-type]
    async with heir.serving() as replica:
        done = await heir.wait("s", sent.id, seconds=10)
    assert done is not None and (done.state, done.text) == ("completed", "answered: go")
    assert seen.requests == [], "the answered turn was not run again"
    assert replica.counters.recorded_on_takeover == 1


class _NativeAnswer:
    """An agent that stores its answer as a framework's own record, as integrations do."""

    steers_per_turn = 16
    runs = 0

    async def run_turn(self, turn: Turn) -> Outcome:
        self.runs += 1
        reply = Message("assistant", (Native("test", '{"kind":"answer"}', "native answer"),))
        await turn.store_session.save([*turn.messages, reply])
        return Outcome("completed", "native answer")


async def test_a_stored_native_answer_is_the_recorded_answer_on_takeover() -> None:
    store, agent = _EndLost(), _NativeAnswer()
    loser = Service(store, agent, replica="loser", lease=0.4, poll=0.05)  # type: ignore[arg-type]
    async with loser.serving() as first_replica:
        sent = await loser.send("s", "go")
        await _until(lambda: _answered(store), "the answer saved")
        await _until(lambda: _idle(first_replica), "the loser giving up on the end")
    heir = Service(store, agent, replica="heir", poll=0.05)  # type: ignore[arg-type]
    async with heir.serving():
        done = await heir.wait("s", sent.id, seconds=10)
    assert done is not None and (done.state, done.text) == ("completed", "native answer")
    assert agent.runs == 1, "the answered turn was not run again"


async def _answered(store: MemoryStore) -> bool:
    messages = await store.messages("s")
    return bool(messages) and messages[-1].role == "assistant" and not messages[-1].tool_calls


async def _idle(replica: object) -> bool:
    return not replica.counters.running  # type: ignore[attr-defined]


class _RenewalsDown(MemoryStore):
    """A memory store whose renewals fail while ``down`` is set."""

    down = False

    async def renew(self, lease, *, seconds):  # type: ignore[no-untyped-def]
        from steerable.errors import StoreUnavailable

        if self.down:
            raise StoreUnavailable("down")
        return await super().renew(lease, seconds=seconds)

    async def renew_many(self, leases, *, seconds):  # type: ignore[no-untyped-def]
        from steerable.errors import StoreUnavailable

        if self.down:
            raise StoreUnavailable("down")
        return await super().renew_many(leases, seconds=seconds)


async def test_a_replica_that_outlived_its_own_lease_takes_the_turn_over_once() -> None:
    """Its own claim loop takes the session over: the old run is fenced, the turn ends once."""
    store = _RenewalsDown()
    service = Service(
        store, demo_agent(seconds=1.0), replica="a", lease=0.4, renew_every=0.1, poll=0.05
    )
    async with service.serving() as replica:
        sent = await service.send("s", "hello")
        await _until(lambda: _tool_result_pending(store), "the tool call")
        store.down = True
        await asyncio.sleep(0.8)  # the lease runs out while renewals fail
        store.down = False
        done = await service.wait("s", sent.id, seconds=10)
    assert done is not None and (done.state, done.text) == ("completed", "answered: hello")
    assert done.epoch is not None and done.epoch >= 2
    assert replica.counters.resumed >= 1 and replica.counters.fenced >= 1
    # the new run recorded the end itself: no third claim had to find it answered
    assert replica.counters.recorded_on_takeover == 0
    ended = [e for e in await service.events("s", after=0, limit=500) if e.kind == "turn_ended"]
    assert len(ended) == 1
    from steerable.messages import transcript_problems

    messages = await store.messages("s")
    assert transcript_problems(messages) == []
    assert [m.role for m in messages if m.role == "assistant" and not m.tool_calls] == ["assistant"]


async def test_an_answer_saved_whose_reply_was_lost_is_not_asked_for_again() -> None:
    store, seen = _Flaky(3, after_writing=True), Recorder()  # the third save is the answer's
    service = Service(store, demo_agent(seconds=0.01, record=seen), poll=0.05)
    async with service.serving():
        sent = await service.send("s", "hello")
        done = await service.wait("s", sent.id, seconds=10)
    assert done is not None and (done.state, done.text) == ("completed", "answered: hello")
    assert len(seen.requests) == 2
    answers = [m for m in await store.messages("s") if m.role == "assistant" and m.text]
    assert [m.text for m in answers] == ["answered: hello"]


class _ClaimBug(MemoryStore):
    """A memory store whose first claim raises something no store should."""

    failed = False

    async def claim(self, holder, *, seconds, cap, session=None, known=None, first=False):  # type: ignore[no-untyped-def]
        if not self.failed:
            self.failed = True
            raise ValueError("a bug in a store")
        return await super().claim(
            holder, seconds=seconds, cap=cap, session=session, known=known, first=first
        )


async def test_a_replica_goes_on_claiming_after_an_unexpected_error() -> None:
    store = _ClaimBug()
    service = Service(store, demo_agent(seconds=0.01), poll=0.05)
    async with service.serving() as replica:
        sent = await service.send("s", "hello")
        done = await service.wait("s", sent.id, seconds=10)
    assert store.failed and replica.counters.store_errors >= 1
    assert done is not None and done.state == "completed"


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.send("s", "x\ud800"),
        lambda s: s.send("s\ud800", "x"),
        lambda s: s.steer("s", "x", id="i\ud800"),
        lambda s: s.send("s" * 256, "x"),
        lambda s: s.send("s", "x", id="i" * 256),
        lambda s: s.send("s", "x", id="a\x00b"),
        lambda s: s.send("s", "x" * 1_000_001),
        lambda s: s.events("s", after=2**70),
        lambda s: s.transcript("s", limit=2**70),
        lambda s: s.transcript("s", after=-2),
        lambda s: s.input("s", 5),
    ],
    ids=[
        "surrogate-text",
        "surrogate-session",
        "surrogate-id",
        "long-session",
        "long-id",
        "nul-id",
        "huge-text",
        "huge-after",
        "huge-limit",
        "after-below",
        "int-id",
    ],
)
async def test_bad_arguments_are_usage_errors_before_any_store_call(call: Any) -> None:
    from steerable.errors import UsageError

    store = MemoryStore()
    with pytest.raises(UsageError):
        await call(Service(store))
    assert await store.events("s", after=0, limit=10) == []


async def test_a_live_sink_that_fails_does_not_fail_the_turn(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls = 0

    def broken(session: str, turn: str, event: object) -> None:
        nonlocal calls
        calls += 1
        raise RuntimeError("the watchers' feed is down")

    service = Service(MemoryStore(), demo_agent(seconds=0.01), live=broken, poll=0.05)
    async with service.serving():
        sent = await service.send("s", "go")
        done = await service.wait("s", sent.id, seconds=10)
    assert done is not None and (done.state, done.text) == ("completed", "answered: go")
    assert calls > 1, "the sink was called for each event, not dropped after the first failure"
    failures = [r for r in caplog.records if "live sink failed" in r.getMessage()]
    assert len(failures) == 1


async def test_a_turn_whose_answer_is_empty_is_recorded_so_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    service = Service(MemoryStore(), ReActAgent(Spec(), ScriptedModel([""])), poll=0.05)
    async with service.serving():
        sent = await service.send("s", "go")
        done = await service.wait("s", sent.id, seconds=10)
    assert done is not None and (done.state, done.text) == ("completed", "")
    said = [r for r in caplog.records if "empty answer" in r.getMessage()]
    assert len(said) == 1 and said[0].levelname == "WARNING"
    assert repr(done.id) in said[0].getMessage()


async def test_a_max_steps_turn_counts_its_requests_and_frees_a_late_steer() -> None:
    # The last results' save is no step (no request follows), and a steer sent during the
    # last call is not taken there (no model would answer it): freed, its own turn.
    service: Service
    calls = 0

    @tool
    async def work() -> str:
        """Works."""
        nonlocal calls
        calls += 1
        if calls == 2:
            steered = await service.steer("s", "and one more thing", id="late")
            assert steered.turn is not None  # offered to the running turn
        return "done"

    model = ScriptedModel([call("work", "{}"), call("work", "{}"), "the late steer's answer"])
    agent = ReActAgent(Spec(tools=[work], max_steps=2), model)
    service = Service(MemoryStore(), agent, poll=0.05)
    async with service.serving():
        sent = await service.send("s", "go")
        done = await service.wait("s", sent.id, seconds=10)
        own = await service.wait("s", "late", seconds=10)
    assert done is not None and (done.state, done.steps, done.steers_taken) == ("max_steps", 2, 0)
    assert len(model.requests) == 3  # two for the turn, one for the freed steer's own turn
    assert own is not None and (own.state, own.text) == ("completed", "the late steer's answer")
