"""``steerable serve --log-format json``: one JSON object a line, every field of a line its own
key, and the id of the request a line was written for.

The formatter and the request id's filter alone, then a real ``serve`` process: every line it
writes (uvicorn's too) parses, a turn's end and a failed turn carry their fields, and an
access line carries the ``X-Request-Id`` its answer had, the client's or a new one.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest

from steerable._logs import JsonFormatter, RequestIdFilter, request_id
from steerable.service._observe import LogObserver, TurnReport
from tests.cli.test_serve import Served, cli, serve, served

__all__ = ["served"]  # a fixture, used by name

AGENT = """
from steerable.service_store import Outcome


class FailsOnRequest:
    steers_per_turn = 0

    async def run_turn(self, turn) -> Outcome:
        if turn.prompt.text == "fail":
            raise RuntimeError("it broke, as asked")
        return Outcome("completed", "fine", usage={"requests": 1})


AGENT = FailsOnRequest()
"""


def record(message: str, *, exc: BaseException | None = None, **extra: Any) -> logging.LogRecord:
    """A record of logger ``steerable.service`` at INFO with ``extra``."""
    info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    return logging.getLogger("steerable.service").makeRecord(
        "steerable.service", logging.INFO, __file__, 1, message, (), info, extra=extra
    )


def formatted(made: logging.LogRecord) -> dict[str, Any]:
    line = JsonFormatter().format(made)
    assert "\n" not in line and line.isascii(), line
    entry: dict[str, Any] = json.loads(line)
    return entry


def test_a_turn_s_end_is_one_object_with_each_field_its_own_key(
    caplog: pytest.LogCaptureFixture,
) -> None:
    report = TurnReport(
        "acme/s1", "t1", "r1", 3, "completed", 4, 1, {"requests": 2}, 1.25, False, None
    )
    with caplog.at_level(logging.INFO, logger="steerable.service"):
        LogObserver().turn_ended(report)
    [made] = caplog.records
    entry = formatted(made)
    assert entry["time"].endswith("Z") and entry["time"][10] == "T"
    assert (entry["level"], entry["logger"]) == ("INFO", "steerable.service")
    assert (
        entry["message"]
        == "turn 't1' of session 'acme/s1' ended completed after 4 steps, 1 steers, 1.250 s"
    )
    fields = {k: entry[k] for k in entry if k not in ("time", "level", "logger", "message")}
    assert fields == {
        "tenant": "acme",
        "session": "acme/s1",
        "turn": "t1",
        "holder": "r1",
        "epoch": 3,
        "state": "completed",
        "steps": 4,
        "steers": 1,
        "usage": {"requests": 2},
        "seconds": 1.25,
        "resumed": False,
        "error": None,
        "event": "turn_ended",
    }


def test_a_traceback_a_line_end_and_values_json_cannot_hold_stay_on_one_line() -> None:
    try:
        raise ValueError("bad\nthing")
    except ValueError as exc:
        caught = exc
    entry = formatted(
        record("sid \u2028 split? caf\u00e9", exc=caught, odd={1, 2}, nan=float("nan"))
    )
    assert entry["message"] == "sid \u2028 split? caf\u00e9"  # escaped in the line
    assert (
        entry["exc_info"].startswith("Traceback") and "ValueError: bad\nthing" in entry["exc_info"]
    )
    assert entry["odd"] == "{1, 2}" and entry["nan"] == "nan"


def test_the_filter_puts_the_request_s_id_on_lines_written_for_it() -> None:
    keep = RequestIdFilter()
    outside = record("no request")
    assert keep.filter(outside) and "request_id" not in formatted(outside)
    token = request_id.set("req-7")
    try:
        inside = record("in a request")
        assert keep.filter(inside)
    finally:
        request_id.reset(token)
    assert formatted(inside)["request_id"] == "req-7"


def test_a_bad_log_format_is_one_line_and_status_2() -> None:
    done = cli("serve", "--store", "sqlite:///x.db", "--log-format", "xml")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--log-format" in lines[0] and "invalid choice" in lines[0]


@pytest.mark.slow
async def test_serve_writes_json_lines_with_turn_fields_and_request_ids(
    tmp_path: Path, served: list[Served]
) -> None:
    module = tmp_path / "fails_on_request.py"
    module.write_text(AGENT)
    flags = ("--agent", f"{module}:AGENT", "--log-format", "json", "--metrics", "--poll", "0.1")
    server = serve(served, f"sqlite:///{tmp_path / 's.db'}", *flags, log=tmp_path / "serve.log")
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        kept = await http.post(
            "/v1/sessions/s1/messages",
            json={"text": "hello", "id": "ok"},
            headers={"X-Request-Id": "client-req.1"},
        )
        assert kept.headers["x-request-id"] == "client-req.1"
        failing = await http.post("/v1/sessions/s1/messages", json={"text": "fail", "id": "no"})
        made = failing.headers["x-request-id"]
        assert len(made) == 32 and made != "client-req.1"
        for turn, state in (("ok", "completed"), ("no", "failed")):
            view = await http.get(f"/v1/sessions/s1/turns/{turn}", params={"wait": 30})
            assert view.json()["state"] == state
        assert (await http.get("/metrics")).status_code == 200
    server.kill()

    entries = [json.loads(line) for line in server.text().splitlines() if line.strip()]
    assert all({"time", "level", "logger", "message"} <= set(e) for e in entries), entries
    [ended] = [e for e in entries if e.get("event") == "turn_ended" and e["turn"] == "ok"]
    assert (ended["tenant"], ended["session"], ended["state"]) == (
        "default",
        "default/s1",
        "completed",
    )
    assert ended["usage"] == {"requests": 1} and ended["steps"] == 0 and not ended["resumed"]
    [failed] = [e for e in entries if e["level"] == "ERROR" and e.get("turn") == "no"]
    assert (failed["logger"], failed["tenant"], failed["session"]) == (
        "steerable.service",
        "default",
        "default/s1",
    )
    assert "RuntimeError: it broke, as asked" in failed["exc_info"]
    access = {e.get("request_id"): e["message"] for e in entries if e["logger"] == "uvicorn.access"}
    assert "POST /v1/sessions/s1/messages" in access["client-req.1"]
    assert "POST /v1/sessions/s1/messages" in access[made]
    assert any(e["message"] == "Application shutdown complete." for e in entries)
