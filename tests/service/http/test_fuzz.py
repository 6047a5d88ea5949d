"""A short schemathesis run against a real ``steerable serve`` (SQLite, with tokens).

``scripts/fuzz_api.py`` generates requests for every route of ``/openapi.json``, valid
(``positive``) and invalid (``negative``), sent with the tenant's token (and some without):
every answer must pass every check schemathesis has: no 5xx, a status the schema documents
for its route, a body and content type that conform to it, what the schema allows accepted
and what it does not refused. Here it makes a few hundred requests; the
long run is the same script with ``--examples 2000`` (docs/http.md, "Fuzzing").
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.test_serve import Served

pytestmark = pytest.mark.slow

pytest.importorskip("schemathesis", reason="the fuzz needs schemathesis (the dev extra)")

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "fuzz_api.py"
EXAMPLES = 20  # per route and mode: some 350 requests in all


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[Served, str]]:
    """``steerable serve`` over a fresh SQLite file, with one token; and the token."""
    token = secrets.token_urlsafe(16)
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{token} fuzz\n", encoding="utf-8")
    store = f"sqlite:///{tmp_path / 'fuzz.db'}"
    served = Served(store, "--tokens", str(tokens), log=tmp_path / "serve.log")
    try:
        yield served.start(), token
    finally:
        served.kill()


def test_every_route_answers_as_documented_never_5xx(server: tuple[Served, str]) -> None:
    served, token = server
    command = [sys.executable, str(SCRIPT), "--url", served.url, "--token", token]
    command += ["--examples", str(EXAMPLES), "--json"]
    done = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=100, check=False
    )
    assert done.returncode == 0, f"{done.stderr}\n{done.stdout}\n{served.text()[-3000:]}"
    counts = json.loads(done.stdout.strip().splitlines()[-1])
    assert counts["failures"] == 0
    assert {"positive_data_acceptance", "negative_data_rejection", "not_a_server_error"} <= set(
        counts["checks"]
    )
    # Every operation of the schema was fuzzed, valid requests and invalid ones.
    routes = counts["routes"]
    for operation in ("POST /v1/sessions/{sid}/messages", "GET /v1/sessions/{sid}/events"):
        assert routes[f"{operation} (positive)"] > 0
        assert routes[f"{operation} (negative)"] > 0
    assert len({r.rsplit(" (", 1)[0] for r in routes}) == 17
    statuses = {int(s) for s in counts["statuses"]}
    assert {202, 401, 404, 422} <= statuses
    assert not {s for s in statuses if s >= 500}
    assert "Traceback" not in served.text()
