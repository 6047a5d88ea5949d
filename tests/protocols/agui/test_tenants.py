"""AG-UI behind the app's tokens: a thread is the tenant's own session; another tenant's
thread of the same name is another session, and its turn cannot be stopped or followed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from ag_ui.core import EventType, MessagesSnapshotEvent, RunFinishedEvent

from tests.protocols.agui.support import Watch, has, open_gate, run_input
from tests.service.gated_agent import two_gated_calls
from tests.service.http.conftest import Build, LiveServer, app_over

TOKENS = {"t0ken-a": "acme", "t0ken-b": "beta"}
A = {"Authorization": "Bearer t0ken-a"}
B = {"Authorization": "Bearer t0ken-b"}


async def test_another_tenants_thread_is_not_reachable(
    serve_app: Callable[[Build], LiveServer], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = tmp_path / "gate"
    monkeypatch.setenv("STEERABLE_TEST_GATE", str(gate))
    url = f"sqlite:///{tmp_path / 'tenants.db'}"
    build = app_over(url, agent=two_gated_calls(), tokens=TOKENS, protocols=["ag-ui"])
    server = serve_app(build)
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        acme = Watch(http, run_input("shared", "r1", "acme's secret plan"), A)
        await acme.until(has(EventType.TOOL_CALL_START))  # acme's turn runs, held on its gate

        nobody = await http.post("/v1/ag-ui", json=run_input("shared", "r9", "hi"))
        stop = await http.post("/v1/ag-ui/shared/stop", headers=B)
        follow = await Watch(http, run_input("shared", "look", None), B).done()
        beta = Watch(http, run_input("shared", "r2", "beta's question"), B)
        await beta.until(has(EventType.TOOL_CALL_START))
        beta_status = (await http.get("/v1/sessions/shared", headers=B)).json()
        open_gate(gate, 1)
        open_gate(gate, 2)
        acme_events, beta_events = await acme.done(), await beta.done()

    assert nobody.status_code == 401
    assert stop.status_code == 404  # beta has no such thread: acme's turn is not stopped
    # beta's "follow" of the thread saw no turn and an empty transcript
    assert [e.type for e in follow][-1] == EventType.RUN_FINISHED
    assert all(not e.messages for e in follow if isinstance(e, MessagesSnapshotEvent))
    # beta's run was a turn of its own (a send), not a steer into acme's running turn
    assert not has(EventType.CUSTOM)(beta_events)
    assert beta_status["turn"]["id"] == "r2"
    for events, mine, theirs in (
        (acme_events, "acme's secret plan", "beta's question"),
        (beta_events, "beta's question", "acme's secret plan"),
    ):
        finished = events[-1]
        assert isinstance(finished, RunFinishedEvent)
        assert finished.metadata == {"steerable": {"turn": finished.run_id, "state": "completed"}}
        snapshot = [e for e in events if isinstance(e, MessagesSnapshotEvent)][-1]
        texts = " ".join(str(m.content) for m in snapshot.messages)
        assert mine in texts and theirs not in texts
