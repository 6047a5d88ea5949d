"""A2A across ``steerable serve`` replicas on one SQLite file: the replica serving a task's
stream (and running its turn) is SIGKILLed; ``SubscribeToTask`` on the other follows the turn
to its end, the steer sent before the kill taken exactly once."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from a2a.types.a2a_pb2 import GetTaskRequest, StreamResponse, SubscribeToTaskRequest, TaskState

from tests.cli.test_serve import Served
from tests.protocols.a2a.test_a2a import (
    aclose,
    connect,
    first_task,
    message,
    open_gate,
    steered_ids,
    until,
)

pytestmark = pytest.mark.slow


def replica(store: str, name: str, tmp_path: Path) -> Served:
    tokens = tmp_path / "tokens"
    tokens.write_text("token-a acme\n")
    flags = ["--agent", "tests.service.gated_agent:two_gated_calls", "--lease", "1"]
    flags += ["--poll", "0.1", "--replica-id", name, "--tokens", str(tokens), "--protocol", "a2a"]
    env = {"STEERABLE_TEST_GATE": str(tmp_path / "gate")}
    return Served(store, *flags, log=tmp_path / f"{name}.log", env=env)


async def test_subscribe_follows_the_turn_after_its_replica_is_killed(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'a2a.db'}"
    a = replica(store, "a", tmp_path).start()
    b = replica(store, "b", tmp_path)
    try:
        on_a = await connect(a.url, "token-a")
        stream = on_a.send_message(message("start", "p1", context="s1"))
        task = await first_task(stream)
        await until(stream, [], "the turn started")
        steer = message("also this", "st1", task=task.id)
        steer.configuration.return_immediately = True
        steering = await connect(a.url, "token-a", streaming=False)
        await anext(aiter(steering.send_message(steer)))

        b.start()
        assert a.kill(signal.SIGKILL) == -signal.SIGKILL
        with pytest.raises(Exception):  # noqa: B017,PT011 - the stream is cut, any way
            await until(stream, [], "never said")
        await aclose(stream)

        on_b = await connect(b.url, "token-a")
        followed = on_b.subscribe(SubscribeToTaskRequest(id=task.id))
        assert (await first_task(followed)).status.state == TaskState.TASK_STATE_WORKING
        seen: list[StreamResponse] = []
        await open_gate(tmp_path / "gate", 1)
        await until(followed, seen, "the turn resumed after a takeover")
        await until(followed, seen, "steer st1 taken at step")
        await open_gate(tmp_path / "gate", 2)
        await until(followed, seen, "the turn ended: completed")
        await aclose(followed)
        done = await on_b.get_task(GetTaskRequest(id=task.id))
    finally:
        a.kill()
        b.kill()
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert steered_ids(done) == ["st1"]
