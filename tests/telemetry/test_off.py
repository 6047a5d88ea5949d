"""With no tracer provider set, steerable loads nothing of OpenTelemetry and makes no span."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from steerable import telemetry

ROOT = Path(__file__).resolve().parents[2]

_RUN = textwrap.dedent(
    """
    import asyncio, sys
    from steerable import Runner, ScriptedModel, Spec, open_session
    from steerable.models.scripted import call
    from steerable.service import ReActAgent, Service
    from steerable.stores.memory import MemoryStore

    def echo(text: str) -> str:
        "Say it back."
        return text

    async def main() -> None:
        store = MemoryStore()
        session = open_session("s", store)
        model = ScriptedModel([call("echo", '{"text": "x"}'), "done"])
        run = Runner.start(Spec(tools=[echo], session=session), "hi", model)
        run.steer("and this")
        assert (await run).reason == "completed"
        agent = ReActAgent(Spec(tools=[echo]), ScriptedModel([call("echo", '{}'), "ok"] * 2))
        service = Service(MemoryStore(), agent, poll=0.05)
        async with service.serving():
            sent = await service.send("t", "hello")
            await service.steer("t", "more")
            assert (await service.wait("t", sent.id, seconds=10)).state == "completed"
        loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry"))
        print(loaded)
        assert not loaded, loaded

    asyncio.run(main())
    """
)


def test_a_run_and_a_service_turn_load_no_opentelemetry() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _RUN], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_with_the_api_loaded_and_no_provider_nothing_records() -> None:
    import opentelemetry.trace  # noqa: F401  (the API's default provider: nothing records)

    assert telemetry.tracer() is None
    assert telemetry.carrier() == {}
    with telemetry.turn_span("a", "s") as span:
        assert span is None
