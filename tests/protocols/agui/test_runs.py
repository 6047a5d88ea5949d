"""AG-UI runs against an in-process app (uvicorn on a free port, SQLite in tmp_path),
driven with ``ag_ui.core``'s types: a send, a steer into the running turn, a steer that
becomes its own turn, a stop, a stream closed and taken up again, and idempotent runIds."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import httpx
import pytest
from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    EventType,
    MessagesSnapshotEvent,
    RunFinishedEvent,
    RunStartedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageStartEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    UserMessage,
)
from fastapi import FastAPI

from steerable.service import Service
from steerable.service.agent import ReActAgent
from steerable.service.demo import DemoModel
from steerable.service.http import LocalLive, create_app
from steerable.service.http._live import Subscription
from steerable.spec import Spec
from steerable.stores.url import open_url
from tests.protocols.agui.support import Watch, has, kinds, open_gate, run_input
from tests.service.gated_agent import two_gated_calls, work
from tests.service.http.conftest import Build, LiveServer, app_over

E = EventType


@pytest.fixture
def gate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The gate files' stem for the gated ``work`` tool."""
    path = tmp_path / "gate"
    monkeypatch.setenv("STEERABLE_TEST_GATE", str(path))
    return path


@pytest.fixture
async def http(
    serve_app: Callable[[Build], LiveServer], tmp_path: Path, gate: Path
) -> AsyncIterator[httpx.AsyncClient]:
    """A client of an app that speaks AG-UI, whose turns make two gated ``work`` calls."""
    url = f"sqlite:///{tmp_path / 'agui.db'}"
    server = serve_app(app_over(url, agent=two_gated_calls(), protocols=["ag-ui"]))
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        yield client


def last_snapshot(events: list[BaseEvent]) -> MessagesSnapshotEvent:
    snapshots = [e for e in events if isinstance(e, MessagesSnapshotEvent)]
    assert snapshots, kinds(events)
    return snapshots[-1]


def assert_run_shape(events: list[BaseEvent], run: str) -> None:
    """RUN_STARTED first, RUN_FINISHED last, steps and text messages well nested."""
    assert isinstance(events[0], RunStartedEvent) and events[0].run_id == run
    assert isinstance(events[-1], RunFinishedEvent) and events[-1].run_id == run
    step: str | None = None
    text: str | None = None
    for event in events[1:-1]:
        name = getattr(event, "step_name", None)
        if event.type == E.STEP_STARTED:
            assert step is None and text is None
            step = name
        elif event.type == E.STEP_FINISHED:
            assert step == name and text is None
            step = None
        elif event.type == E.TEXT_MESSAGE_START:
            assert text is None
            text = getattr(event, "message_id", None)
        elif event.type == E.TEXT_MESSAGE_END:
            assert text == getattr(event, "message_id", None)
            text = None
        elif event.type in (E.TOOL_CALL_START, E.RUN_STARTED, E.RUN_FINISHED):
            assert text is None
    assert step is None and text is None


async def transcript_ids(http: httpx.AsyncClient, thread: str) -> list[str]:
    answer = await http.get(f"/v1/sessions/{thread}/transcript", params={"limit": 1000})
    assert answer.status_code == 200, answer.text
    return [m["id"] for m in answer.json()["messages"]]


async def test_a_send_streams_the_turn_as_agui_events(http: httpx.AsyncClient, gate: Path) -> None:
    open_gate(gate, 1)
    open_gate(gate, 2)
    events = await Watch(http, run_input("t1", "r1", "plan my week")).done()

    assert_run_shape(events, "r1")
    seen = kinds(events)
    for kind in (E.STEP_STARTED, E.TOOL_CALL_ARGS, E.TOOL_CALL_END, E.TEXT_MESSAGE_CONTENT):
        assert kind in seen, seen
    calls = [e for e in events if isinstance(e, ToolCallStartEvent)]
    results = [e for e in events if isinstance(e, ToolCallResultEvent)]
    assert [c.tool_call_name for c in calls] == ["work", "work"]
    assert [r.tool_call_id for r in results] == [c.tool_call_id for c in calls]
    assert [r.content for r in results] == ["step 1 done", "step 2 done"]
    said = "".join(e.delta for e in events if isinstance(e, TextMessageContentEvent)).strip()
    assert said == "answered: plan my week"
    snapshot = last_snapshot(events).messages
    assert isinstance(snapshot[0], UserMessage) and snapshot[0].id == "r1"
    assert snapshot[-1].role == "assistant" and snapshot[-1].content == said
    assert events[0].metadata == {"steerable": {"turn": "r1"}}
    shown = [m.id for m in snapshot if m.role != "tool"]
    assert [i for i in await transcript_ids(http, "t1") if i in shown] == shown
    assert [m.id for m in snapshot if m.role == "tool"] == [
        f"{r.tool_call_id}.result" for r in results
    ]


async def test_a_second_run_steers_the_running_turn_at_its_next_step(
    http: httpx.AsyncClient, gate: Path
) -> None:
    first = Watch(http, run_input("t2", "r1", "plan my week"))
    await first.until(has(E.TOOL_CALL_START))  # work(1) waits on its gate: the turn runs

    second = Watch(http, run_input("t2", "r2", "skip friday"))
    await second.until(has(E.CUSTOM))
    open_gate(gate, 1)
    open_gate(gate, 2)
    events, steered = await first.done(), await second.done()

    assert_run_shape(events, "r1")
    assert_run_shape(steered, "r2")
    joined = [e for e in steered if isinstance(e, CustomEvent)]
    assert [(e.name, e.value) for e in joined] == [
        ("steerable.steer", {"turn": "r1", "input": "r2"})
    ]
    # the first run shows the steer taken, as a user message, in the step that took it
    shown = [
        i for i, e in enumerate(events) if isinstance(e, TextMessageStartEvent) and e.role == "user"
    ]
    assert len(shown) == 1 and getattr(events[shown[0]], "message_id", None) == "r2"
    steps = [e for e in events[: shown[0]] if isinstance(e, StepStartedEvent)]
    assert steps[-1].step_name == "step 2"
    replies = {
        e.message_id
        for e in events
        if isinstance(e, TextMessageStartEvent) and e.role == "assistant"
    }
    said = "".join(
        e.delta
        for e in events
        if isinstance(e, TextMessageContentEvent) and e.message_id in replies
    ).strip()
    assert said == "answered: plan my week | skip friday"
    assert isinstance(steered[-1], RunFinishedEvent)
    assert steered[-1].metadata == {"steerable": {"turn": "r1", "state": "completed"}}
    # exactly once in the transcript, and taken at step 2
    assert (await transcript_ids(http, "t2")).count("r2") == 1
    fate = (await http.get("/v1/sessions/t2/inputs/r2")).json()
    assert (fate["state"], fate["turn"], fate["step"]) == ("taken", "r1", 2)


async def test_a_steer_the_turn_cannot_take_becomes_its_own_turn(
    serve_app: Callable[[Build], LiveServer], tmp_path: Path, gate: Path
) -> None:
    """The turn writes its answer (a slow model) when the steer comes: it ends without
    another step, frees the steer, and the steer's run follows its own turn."""
    agent = ReActAgent(Spec(tools=[work], max_steps=6), DemoModel(calls=1, delay=2.0))
    url = f"sqlite:///{tmp_path / 'own.db'}"
    server = serve_app(app_over(url, agent=agent, protocols=["ag-ui"]))
    open_gate(gate, 1)
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        first = Watch(http, run_input("t3", "r1", "plan"))
        await first.until(has(E.STEP_STARTED, step_name="step 2"))  # the answer is coming
        second = Watch(http, run_input("t3", "r2", "and more"))
        events, own = await first.done(), await second.done()
        ids = await transcript_ids(http, "t3")

    assert_run_shape(own, "r2")
    names = [(e.name, e.value) for e in own if isinstance(e, CustomEvent)]
    assert names == [
        ("steerable.steer", {"turn": "r1", "input": "r2"}),
        ("steerable.own_turn", {"turn": "r2"}),
    ]
    assert own[-1].metadata == {"steerable": {"turn": "r2", "state": "completed"}}
    mine = own[own.index(next(e for e in own if getattr(e, "name", "") == "steerable.own_turn")) :]
    said = "".join(e.delta for e in mine if isinstance(e, TextMessageContentEvent)).strip()
    assert said == "answered: and more"
    assert not has(E.TEXT_MESSAGE_START, role="user")(events)
    assert ids.count("r2") == 1


async def test_stop_ends_the_run_cancelled(http: httpx.AsyncClient, gate: Path) -> None:
    run = Watch(http, run_input("t4", "r1", "plan my week"))
    await run.until(has(E.TOOL_CALL_START))

    stopped = await http.post("/v1/ag-ui/t4/stop")
    events = await run.done()

    assert stopped.status_code == 202 and stopped.json() == {"turn": "r1"}
    assert_run_shape(events, "r1")
    finished = events[-1]
    assert isinstance(finished, RunFinishedEvent) and finished.outcome is not None
    assert finished.outcome.type == "cancelled"
    assert (await http.post("/v1/ag-ui/nothing-here/stop")).status_code == 404


async def test_a_closed_stream_leaves_the_turn_running_and_a_repost_follows_it(
    http: httpx.AsyncClient, gate: Path
) -> None:
    body = run_input("t5", "r1", "plan my week")
    run = Watch(http, body)
    await run.until(has(E.TOOL_CALL_START))
    await run.close()

    again = Watch(http, body)  # the same runId: the same input, followed again
    await again.until(has(E.MESSAGES_SNAPSHOT))
    status = (await http.get("/v1/sessions/t5")).json()
    assert status["turn"]["id"] == "r1" and status["turn"]["state"] == "running"
    open_gate(gate, 1)
    open_gate(gate, 2)
    events = await again.done()

    assert_run_shape(events, "r1")
    first = events[1]  # the turn so far, since the client missed it
    assert isinstance(first, MessagesSnapshotEvent) and first.messages[0].id == "r1"
    assert (await transcript_ids(http, "t5")).count("r1") == 1
    assert (await http.get("/v1/sessions/t5/turns/r1")).json()["state"] == "completed"


async def test_a_runid_used_with_another_message_is_refused(
    http: httpx.AsyncClient, gate: Path
) -> None:
    open_gate(gate, 1)
    open_gate(gate, 2)
    await Watch(http, run_input("t6", "r1", "plan my week")).done()

    other = await http.post("/v1/ag-ui", json=run_input("t6", "r1", "something else"))
    blank = await http.post("/v1/ag-ui", json=run_input("t6", "r2", "   "))
    slash = await http.post("/v1/ag-ui", json=run_input("a/b", "r3", "hi"))

    assert other.status_code == 409 and other.json()["code"] == "idempotency_conflict"
    assert blank.status_code == 422 and slash.status_code == 422
    assert (await transcript_ids(http, "t6")).count("r1") == 1


async def test_a_run_with_no_user_message_last_follows_or_just_snapshots(
    http: httpx.AsyncClient, gate: Path
) -> None:
    open_gate(gate, 1)
    open_gate(gate, 2)
    await Watch(http, run_input("t7", "r1", "plan my week")).done()

    events = await Watch(http, run_input("t7", "look", None)).done()

    assert kinds(events) == [
        E.RUN_STARTED,
        E.MESSAGES_SNAPSHOT,
        E.MESSAGES_SNAPSHOT,
        E.RUN_FINISHED,
    ]
    assert last_snapshot(events).messages[0].id == "r1"


async def test_a_run_on_a_replica_that_does_not_run_the_turn_shows_what_was_stored(
    serve_app: Callable[[Build], LiveServer], tmp_path: Path, gate: Path
) -> None:
    """No live deltas reach a front end that serves no turns (SQLite's feed is in-process):
    each reply is shown whole, with its stored id, and each tool call from the stored reply."""
    url = f"sqlite:///{tmp_path / 'front.db'}"
    serve_app(app_over(url, agent=two_gated_calls()))  # runs the turns, speaks no AG-UI
    front = serve_app(app_over(url, agent=two_gated_calls(), serve=False, protocols=["ag-ui"]))
    open_gate(gate, 1)
    open_gate(gate, 2)
    async with httpx.AsyncClient(base_url=front.url, timeout=30) as http:
        events = await Watch(http, run_input("t8", "r1", "plan my week")).done()

    assert_run_shape(events, "r1")
    stored = last_snapshot(events).messages
    texts = [e for e in events if isinstance(e, TextMessageContentEvent)]
    assert [(t.message_id, t.delta) for t in texts] == [(stored[-1].id, "answered: plan my week")]
    calls = [e for e in events if isinstance(e, ToolCallStartEvent)]
    replies = [m.id for m in stored if m.role == "assistant" and m.tool_calls]
    assert [c.parent_message_id for c in calls] == replies and len(replies) == 2


class _SlowToSubscribe(LocalLive):
    """A feed whose subscriptions take half a second to be made (a LISTEN on a busy
    database): a stream that subscribes after its input is written misses what the turn
    does first."""

    def subscribe(self, session: str) -> AbstractAsyncContextManager[Subscription]:
        made = super().subscribe(session)

        @asynccontextmanager
        async def slowly() -> AsyncIterator[Subscription]:
            await asyncio.sleep(0.5)
            async with made as subscription:
                yield subscription

        return slowly()


async def test_a_tool_call_that_starts_at_once_is_not_missed(
    serve_app: Callable[[Build], LiveServer], tmp_path: Path, gate: Path
) -> None:
    # the run subscribes to the thread's live events before its input is written
    url = f"sqlite:///{tmp_path / 'slow.db'}"
    live = _SlowToSubscribe()

    @asynccontextmanager
    async def build() -> AsyncIterator[FastAPI]:
        async with open_url(url) as store:
            service = Service(store, two_gated_calls(), poll=0.05, live=live.sink)
            yield create_app(service, live=live, protocols=["ag-ui"])

    server = serve_app(build)
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        run = Watch(http, run_input("t9", "r1", "go"))
        await run.until(has(E.TOOL_CALL_START), seconds=10)  # the tool waits at its gate
        open_gate(gate, 1)
        open_gate(gate, 2)
        events = await run.done()
    assert_run_shape(events, "r1")
    starts = [e for e in events if isinstance(e, ToolCallStartEvent)]
    assert len(starts) == 2
