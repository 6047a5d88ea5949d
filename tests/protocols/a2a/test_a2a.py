"""A2A driven by a2a-sdk's own client against an app over SQLite, served by uvicorn.

The agent's tool calls wait on gate files (tests/service/gated_agent.py), so "the turn is
running" is certain while a steer or a cancel is sent; a slow model's answer is what keeps
it running while a steer comes too late to be taken.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import httpx
import pytest
from a2a.client import Client, ClientConfig, create_client
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskState,
)
from a2a.utils.errors import TaskNotFoundError, UnsupportedOperationError

from steerable.service.agent import ReActAgent
from steerable.service.demo import DemoModel
from steerable.service.http.a2a._tasks import decode_task, encode_task
from steerable.spec import Spec
from tests.service.gated_agent import two_gated_calls, work
from tests.service.http.conftest import Build, LiveServer, app_over

TOKENS = {"token-a": "acme", "token-b": "bravo"}
BEARER_A = {"Authorization": "Bearer token-a"}
WORKING = TaskState.TASK_STATE_WORKING


@pytest.fixture
def gate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The gate files' stem: ``gate.N`` lets the turn's call N finish."""
    monkeypatch.setenv("STEERABLE_TEST_GATE", str(tmp_path / "gate"))
    return tmp_path / "gate"


@pytest.fixture
def server(tmp_path: Path, gate: Path) -> Iterator[LiveServer]:
    """An app speaking A2A over a SQLite file, with two tenants."""
    live = LiveServer(a2a_app(f"sqlite:///{tmp_path / 'a2a.db'}")).start()
    yield live
    live.stop()


def a2a_app(url: str) -> Build:
    """The app over the store at ``url`` with A2A mounted, tenants acme and bravo."""
    return app_over(url, agent=two_gated_calls(), tokens=TOKENS, protocols=["a2a"])


OPENED: list[httpx.AsyncClient] = []


async def connect(url: str, token: str, *, streaming: bool = True) -> Client:
    """The SDK's client, from the agent card, with the tenant's token on every call (its
    httpx client closed after the test)."""
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    OPENED.append(http)
    return await create_client(url, ClientConfig(httpx_client=http, streaming=streaming))


@pytest.fixture
async def acme(server: LiveServer) -> AsyncIterator[Client]:
    """A streaming client of tenant acme."""
    client = await connect(server.url, "token-a")
    yield client
    while OPENED:
        await OPENED.pop().aclose()


def message(text: str, id: str, *, context: str = "", task: str = "") -> SendMessageRequest:
    """A user message as the SDK's request."""
    said = Message(message_id=id, context_id=context, task_id=task, role=Role.ROLE_USER)
    said.parts.append(Part(text=text))
    return SendMessageRequest(message=said)


async def first_task(stream: AsyncIterator[StreamResponse]) -> Task:
    """The stream's first event, a task."""
    event = await anext(aiter(stream))
    assert event.HasField("task"), event
    return event.task


async def until(
    stream: AsyncIterator[StreamResponse], seen: list[StreamResponse], text: str
) -> None:
    """Read the stream into ``seen`` until a status message says ``text``."""
    await read_until(stream, seen, lambda parts: any(text in p.text for p in parts), text)


async def read_until(
    stream: AsyncIterator[StreamResponse],
    seen: list[StreamResponse],
    found: Callable[[list[Part]], bool],
    what: str,
) -> None:
    """Read the stream into ``seen`` until ``found`` holds of a status message's parts."""
    async for event in stream:
        seen.append(event)
        if event.HasField("status_update") and found(
            list(event.status_update.status.message.parts)
        ):
            return
    raise AssertionError(f"the stream ended before {what}: {seen}")


def tool_result(parts: list[Part]) -> bool:
    """Whether a message carries a tool's result (saved with the step that follows it)."""
    return any(p.HasField("data") and "tool_result" in p.data.struct_value.fields for p in parts)


async def open_gate(gate: Path, step: int) -> None:
    """Let the turn's call ``step`` finish."""
    await asyncio.to_thread(Path(f"{gate}.{step}").touch)


def steered_ids(task: Task) -> list[str]:
    return [m.message_id for m in task.history if m.metadata.fields.get("steered")]


async def test_the_card_is_public_and_names_the_endpoint_and_bearer(server: LiveServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as http:
        card = (await http.get("/.well-known/agent-card.json")).json()
        refused = await http.post("/v1/a2a", json={"jsonrpc": "2.0", "id": 1, "method": "GetTask"})
    assert card["supportedInterfaces"][0]["url"] == f"{server.url}/v1/a2a"
    assert card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == "Bearer"
    assert card["capabilities"]["streaming"] is True
    assert refused.status_code == 401


async def test_a_send_then_a_steer_to_the_working_task_is_taken_once(
    acme: Client, gate: Path, server: LiveServer
) -> None:
    stream = aiter(acme.send_message(message("start", "p1", context="s1")))
    task = await first_task(stream)
    assert decode_task(task.id) == ("s1", "p1")
    seen: list[StreamResponse] = []
    await until(stream, seen, "the turn started")

    steerer = await connect(server.url, "token-a", streaming=False)  # another client
    steer = message("also this", "st1", task=task.id)
    steer.configuration.return_immediately = True
    answer = (await anext(aiter(steerer.send_message(steer)))).task
    again = (await anext(aiter(steerer.send_message(steer)))).task  # the same id: a retry
    assert answer.status.state == again.status.state == WORKING
    assert "st1 offered" in answer.status.message.parts[0].text

    await open_gate(gate, 1)
    await until(stream, seen, "steer st1 taken at step")
    await open_gate(gate, 2)
    await until(stream, seen, "the turn ended: completed")
    assert seen[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    await aclose(stream)
    assert any(e.artifact_update.artifact.parts for e in seen if e.HasField("artifact_update"))

    done = await steerer.get_task(GetTaskRequest(id=task.id))
    await steerer.close()
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert done.artifacts[0].parts[0].text
    assert steered_ids(done) == ["st1"]
    entries = server.call(lambda: server_transcript(server))
    assert [e for e in entries if e == "st1"] == ["st1"]


async def server_transcript(server: LiveServer) -> list[str]:
    """The ids of the steered messages in acme's session s1."""
    assert server.app is not None
    service = server.app.state.service
    return [e.message.id for e in await service.transcript("acme/s1") if e.message.steered]


@pytest.fixture
async def answering(tmp_path: Path, gate: Path) -> AsyncIterator[LiveServer]:
    """An app speaking A2A whose turns make one ``work`` call, then take two seconds to
    write the answer (a slow model): a steer sent meanwhile comes after the turn's last
    step. The clients the test connects are closed after it."""
    agent = ReActAgent(Spec(tools=[work], max_steps=6), DemoModel(calls=1, delay=2.0))
    url = f"sqlite:///{tmp_path / 'own.db'}"
    live = LiveServer(app_over(url, agent=agent, tokens=TOKENS, protocols=["a2a"])).start()
    yield live
    while OPENED:
        await OPENED.pop().aclose()
    live.stop()


async def test_a_steer_the_task_cannot_take_becomes_a_task_of_its_own(
    answering: LiveServer, gate: Path
) -> None:
    """The task writes its answer (a slow model) when a message to it comes: it ends without
    another step, frees the steer, and the steer's answer is the task it became."""
    await open_gate(gate, 1)
    acme = await connect(answering.url, "token-a")
    stream = aiter(acme.send_message(message("plan", "p1", context="s1")))
    task = await first_task(stream)
    seen: list[StreamResponse] = []
    await read_until(stream, seen, tool_result, "the tool's result")  # its answer is coming

    steerer = await connect(answering.url, "token-a", streaming=False)
    steer = steerer.send_message(message("and more", "st1", task=task.id))
    fated = (await anext(aiter(steer))).task  # the answer waits for the steer's fate
    own_id = encode_task("s1", "st1")
    assert fated.id == own_id
    assert fated.status.message.parts[0].text == "the turn ended first: st1 is a task of its own"

    await until(stream, seen, "the turn ended: completed")
    await aclose(stream)
    ended = seen[-1].status_update
    assert ended.status.state == TaskState.TASK_STATE_COMPLETED
    assert list(ended.metadata["released"]) == [own_id]

    first = await steerer.get_task(GetTaskRequest(id=task.id))
    own = await settled(steerer, own_id)
    async with httpx.AsyncClient(base_url=answering.url, headers=BEARER_A) as http:
        transcript = (await http.get("/v1/sessions/s1/transcript")).json()["messages"]

    assert first.status.state == TaskState.TASK_STATE_COMPLETED
    assert first.artifacts[0].parts[0].text == "answered: plan"
    assert "st1" not in [m.message_id for m in first.history] and not steered_ids(first)
    assert own.status.state == TaskState.TASK_STATE_COMPLETED
    assert own.history[0].message_id == "st1" and not steered_ids(own)
    assert own.artifacts[0].parts[0].text == "answered: and more"
    mine = [(m["turn"], m["steered"]) for m in transcript if m["id"] == "st1"]
    assert mine == [("st1", False)]  # once, as the prompt of its own turn


async def settled(client: Client, task_id: str) -> Task:
    """The task once it is over (read every 50 ms, for 30 s at most)."""
    async with asyncio.timeout(30):
        while True:
            task = await client.get_task(GetTaskRequest(id=task_id))
            if task.status.state not in (WORKING, TaskState.TASK_STATE_SUBMITTED):
                return task
            await asyncio.sleep(0.05)


async def test_a_message_to_a_finished_task_is_refused(acme: Client, gate: Path) -> None:
    await open_gate(gate, 1)
    await open_gate(gate, 2)
    events = [e async for e in acme.send_message(message("go", "p1", context="s1"))]
    task_id = events[0].task.id
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    with pytest.raises(UnsupportedOperationError, match="terminal"):
        [e async for e in acme.send_message(message("late", "late", task=task_id))]


async def test_cancel_stops_the_working_turn(acme: Client) -> None:
    stream = aiter(acme.send_message(message("start", "p1", context="s1")))
    task = await first_task(stream)
    await until(stream, [], "the turn started")
    cancelled = await acme.cancel_task(CancelTaskRequest(id=task.id))
    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
    seen: list[StreamResponse] = []
    await until(stream, seen, "the turn ended: stopped")
    assert seen[-1].status_update.status.state == TaskState.TASK_STATE_CANCELED
    await aclose(stream)


async def test_another_tenant_cannot_reach_the_task(acme: Client, server: LiveServer) -> None:
    stream = acme.send_message(message("start", "p1", context="s1"))
    task = await first_task(stream)
    await until(stream, [], "the turn started")
    await aclose(stream)
    bravo = await connect(server.url, "token-b", streaming=False)
    with pytest.raises(TaskNotFoundError):
        await bravo.get_task(GetTaskRequest(id=task.id))
    with pytest.raises(TaskNotFoundError):
        [e async for e in bravo.send_message(message("x", "b1", task=task.id))]
    with pytest.raises(TaskNotFoundError):
        await bravo.cancel_task(CancelTaskRequest(id=task.id))
    await bravo.close()
    mine = await acme.get_task(GetTaskRequest(id=task.id))
    assert mine.status.state == WORKING


async def aclose(stream: AsyncIterator[StreamResponse]) -> None:
    """End a stream the test stops reading."""
    close = getattr(stream, "aclose", None)
    if close is not None:
        await close()
