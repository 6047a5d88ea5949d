"""Fuzz the HTTP API with schemathesis: every route of ``/openapi.json``, valid and invalid.

::

    python scripts/fuzz_api.py                      # a steerable serve of its own (SQLite)
    python scripts/fuzz_api.py --examples 2000      # the long run (per route and mode)
    python scripts/fuzz_api.py --url http://127.0.0.1:8000 --token T0KEN

Each route gets ``--examples`` generated requests in each mode (``positive``: what the
schema allows; ``negative``: what it does not), sent with the tenant's bearer token (and a
share without it). Every answer must be no 5xx (``not_a_server_error``), have a status the
schema documents for the route, a body and content type that conform to it, and pass every
other check schemathesis has (``positive_data_acceptance``: what the schema allows is not
refused; ``negative_data_rejection``: what it does not allow is; ``ignored_auth``, ...). A failure
prints the exact request (as curl) and what was wrong; the exit status is 1. The counts
(requests per route, per status) are printed at the end, and as JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import secrets
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import Case as AnyCase
from schemathesis import GenerationMode
from schemathesis.checks import CHECKS as ALL_CHECKS
from schemathesis.checks import CheckFunction, load_all_checks
from schemathesis.core.result import Err

Case = AnyCase[Any]
ROOT = Path(__file__).resolve().parents[1]
load_all_checks()  # the registry holds only the first check until every module is loaded
CHECKS: list[CheckFunction] = [c for c in ALL_CHECKS.get_all() if not isinstance(c, type)]
"""Every check schemathesis has (``not_a_server_error``, the conformance checks,
``positive_data_acceptance``, ``negative_data_rejection``, ``ignored_auth``, ...)."""
MAX_WAIT = 0.2  # a turn's ?wait, capped: the fuzz is about answers, not about waiting
STREAM_SECONDS = 0.5  # how long an event stream is read (it never ends by itself)


@dataclass
class Counts:
    """What a run sent and got back."""

    requests: int = 0
    routes: Counter[str] = field(default_factory=Counter)
    statuses: Counter[int] = field(default_factory=Counter)
    failures: dict[str, str] = field(default_factory=dict)  # the last (shrunk) per route

    def as_json(self) -> dict[str, Any]:
        """The counts as a JSON object."""
        return {
            "requests": self.requests,
            "routes": dict(self.routes),
            "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
            "failures": len(self.failures),
            "checks": [check.__name__ for check in CHECKS],
        }


def _capped(case: Case) -> Case:
    wait = (case.query or {}).get("wait")
    if isinstance(wait, int | float) and not isinstance(wait, bool) and wait > MAX_WAIT:
        case.query["wait"] = MAX_WAIT
    if case.query:
        # An unknown parameter with the value null is dropped by the HTTP client, so the
        # request sent is not the invalid one schemathesis judges: send it empty instead.
        known = {p.name for p in case.operation.query}
        for name, value in list(case.query.items()):
            if value is None and name not in known:
                case.query[name] = ""
    return case


def _one(case: Case, base_url: str, token: str | None, counts: Counts, label: str) -> None:
    # The tenant's token where schemathesis put a bearer header of its own making; none
    # where it left the header out (a negative case: the 401 is what it checks for).
    given: dict[str, Any] = dict(case.headers or {})
    headers: dict[str, str] = {}
    if token is not None and any(k.lower() == "authorization" for k in given):
        headers = {"Authorization": f"Bearer {token}"}
    stream = case.operation.path.endswith("/events")
    timeout = STREAM_SECONDS if stream else 30.0
    response = case.call(base_url=base_url, headers=headers, timeout=timeout)
    counts.requests += 1
    counts.routes[label] += 1
    counts.statuses[response.status_code] += 1
    try:
        case.validate_response(response, checks=CHECKS, headers=headers)
    except Exception as exc:
        curl = case.as_curl_command(headers=headers, base_url=base_url)
        counts.failures[label] = f"{label}: {type(exc).__name__}: {exc}\n  request: {curl}"
        raise


def fuzz(
    base_url: str,
    token: str | None,
    *,
    examples: int,
    modes: list[GenerationMode],
    seed: int | None = None,
) -> Counts:
    """Fuzz every operation of the API at ``base_url``; the counts (failures included)."""
    schema = schemathesis.openapi.from_url(f"{base_url}/openapi.json", timeout=30)
    counts = Counts()
    for result in schema.get_all_operations():
        if isinstance(result, Err):
            counts.failures[f"schema {result.err()}"] = f"the schema is invalid: {result.err()}"
            continue
        operation = result.ok()
        for mode in modes:
            label = f"{operation.method.upper()} {operation.path} ({mode.value})"
            strategy = operation.as_strategy(generation_mode=mode).map(_capped)
            # One request in eight without the token: the 401 is documented too.
            tokens = st.sampled_from([token] * 7 + [None]) if token is not None else st.none()
            _run(strategy, tokens, base_url, counts, label, examples, seed)
    return counts


def _run(
    strategy: st.SearchStrategy[Case],
    tokens: st.SearchStrategy[str | None],
    base_url: str,
    counts: Counts,
    label: str,
    examples: int,
    seed: int | None,
) -> None:
    @settings(
        max_examples=examples,
        database=None,
        deadline=None,
        derandomize=seed is None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate, Phase.target, Phase.shrink],
        report_multiple_bugs=False,
    )
    @given(case=strategy, token=tokens)
    def each(case: Case, token: str | None) -> None:
        _one(case, base_url, token, counts, label)

    if seed is not None:
        each = _seeded(each, seed)
    try:
        each()
    except Unsatisfiable:
        pass  # no request is invalid for this mode (a route without parameters or body)
    except (Exception, BaseExceptionGroup) as exc:  # told, with its request
        counts.failures.setdefault(label, f"{label}: {type(exc).__name__}: {exc}")


def _seeded(test: Any, seed: int) -> Any:
    from hypothesis import seed as with_seed

    return with_seed(seed)(test)


@contextlib.contextmanager
def own_server(directory: Path) -> Iterator[tuple[str, str]]:
    """A ``steerable serve`` over a fresh SQLite file with one token: (its URL, the token)."""
    token = secrets.token_urlsafe(16)
    tokens = directory / "tokens"
    tokens.write_text(f"{token} fuzz\n", encoding="utf-8")
    log = directory / "serve.log"
    command = [sys.executable, "-m", "steerable.cli", "serve", "--port", "0"]
    command += ["--store", f"sqlite:///{directory / 'fuzz.db'}", "--tokens", str(tokens)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with log.open("wb") as out:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + 60
        while not (found := re.search(r"running on (http://\S+:\d+)", log.read_text())):
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"steerable serve did not start:\n{log.read_text()}")
            time.sleep(0.05)
        yield found.group(1), token
    finally:
        process.terminate()
        process.wait(30)


def main(argv: list[str] | None = None) -> int:
    """Run the fuzz; print the counts and any failure; 1 when something failed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running server (default: start one on SQLite)")
    parser.add_argument("--token", help="the bearer token for --url (none: no auth)")
    parser.add_argument("--examples", type=int, default=100, help="per route and mode")
    parser.add_argument("--modes", default="positive,negative", help="positive,negative")
    parser.add_argument("--seed", type=int, help="a seed (default: derandomized)")
    parser.add_argument("--json", action="store_true", help="the counts as one JSON line")
    args = parser.parse_args(argv)
    modes = [GenerationMode(m.strip()) for m in args.modes.split(",") if m.strip()]
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        if args.url is None:
            directory = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            url, token = stack.enter_context(own_server(directory))
        else:
            url, token = args.url.rstrip("/"), args.token
        counts = fuzz(url, token, examples=args.examples, modes=modes, seed=args.seed)
    for failure in counts.failures.values():
        print(f"FAILED {failure}", file=sys.stderr)
    if args.json:
        print(json.dumps(counts.as_json() | {"seconds": round(time.monotonic() - started, 1)}))
    else:
        for route, number in sorted(counts.routes.items()):
            print(f"{number:7d}  {route}")
        statuses = ", ".join(f"{k}: {v}" for k, v in sorted(counts.statuses.items()))
        print(f"{counts.requests} requests in {time.monotonic() - started:.0f} s; {statuses}")
        print(f"{len(counts.failures)} failures")
    return 1 if counts.failures else 0


if __name__ == "__main__":
    sys.exit(main())
