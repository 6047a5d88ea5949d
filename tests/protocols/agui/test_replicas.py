"""A run followed again after the replica streaming it is SIGKILLed: two ``steerable serve
--protocol ag-ui`` processes on one SQLite file; the client posts the same run to the other
replica, which takes the turn over when the lease expires and streams it to its end."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx
import pytest
from ag_ui.core import EventType, MessagesSnapshotEvent, RunFinishedEvent, RunStartedEvent

from tests.cli.test_serve import Served
from tests.protocols.agui.support import Watch, has, open_gate, run_input

pytestmark = pytest.mark.slow


def _replica(url: str, tmp_path: Path, name: str) -> Served:
    flags = ["--agent", "tests.service.gated_agent:two_gated_calls", "--protocol", "ag-ui"]
    flags += ["--lease", "1", "--poll", "0.1", "--replica-id", name]
    env = {"STEERABLE_TEST_GATE": str(tmp_path / "gate")}
    return Served(url, *flags, log=tmp_path / f"{name}.log", env=env)


async def test_a_run_is_followed_again_on_another_replica_after_a_sigkill(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'replicas.db'}"
    a = _replica(url, tmp_path, "a").start()  # alone: it claims the turn
    b = _replica(url, tmp_path, "b")
    body = run_input("t", "r1", "plan my week")
    try:
        async with httpx.AsyncClient(base_url=a.url, timeout=30) as http:
            first = Watch(http, body)
            await first.until(has(EventType.TOOL_CALL_START))  # a runs work(1), held
            assert a.kill(signal.SIGKILL) == -signal.SIGKILL
            await first.close()
        b.start()
        async with httpx.AsyncClient(base_url=b.url, timeout=30) as http:
            again = Watch(http, body)  # the same run, posted to the replica that is left
            await again.until(has(EventType.MESSAGES_SNAPSHOT))
            open_gate(tmp_path / "gate", 1)
            open_gate(tmp_path / "gate", 2)
            events = await again.done(seconds=40)
            turn = (await http.get("/v1/sessions/t/turns/r1")).json()
            ids = [
                m["id"] for m in (await http.get("/v1/sessions/t/transcript")).json()["messages"]
            ]
    finally:
        a.kill(signal.SIGKILL)
        b.kill()

    assert isinstance(events[0], RunStartedEvent) and events[0].run_id == "r1"
    assert isinstance(events[1], MessagesSnapshotEvent) and events[1].messages[0].id == "r1"
    finished = events[-1]
    assert isinstance(finished, RunFinishedEvent)
    assert finished.metadata == {"steerable": {"turn": "r1", "state": "completed"}}
    assert has(EventType.TOOL_CALL_RESULT)(events) and has(EventType.TEXT_MESSAGE_CONTENT)(events)
    assert turn["state"] == "completed" and turn["epoch"] == 2, turn  # b took it over from a
    assert ids.count("r1") == 1
