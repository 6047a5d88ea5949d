"""``steerable serve`` and ``steerable migrate`` as real processes, on SQLite and Postgres.

A served replica answers the HTTP API on the port it was given (0: one the OS picks, read
from uvicorn's start line), serves turns with the agent ``--agent`` names, refuses a
non-loopback address without tokens, and never migrates: ``steerable migrate`` does,
once. Bad flags are a line or two on stderr and exit status 2, never a traceback.

:class:`Served` is also what the client's and the remote chat's tests start servers with.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

from steerable.cli.serve import load_tokens
from steerable.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


class Served:
    """One ``steerable serve`` process; its stderr goes to a log file, read for the port."""

    def __init__(
        self,
        store: str,
        *flags: str,
        log: Path,
        env: dict[str, str] | None = None,
        cwd: Path = ROOT,
    ) -> None:
        self.log, self.cwd = log, cwd
        self.command = [sys.executable, "-m", "steerable.cli", "serve", "--store", store]
        self.command += ["--port", "0", *flags]
        self.env = {**os.environ, **(env or {})}
        self.process: subprocess.Popen[bytes] | None = None
        self.host = "127.0.0.1"
        self.port = 0

    @property
    def url(self) -> str:
        """The base URL it answers on (an IPv6 address in brackets; 0.0.0.0: loopback)."""
        host = "127.0.0.1" if self.host == "0.0.0.0" else self.host
        return f"http://{host}:{self.port}"

    def start(self, timeout: float = 30) -> Served:
        """Start it and wait until uvicorn says where it listens."""
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                self.command, cwd=self.cwd, env=self.env, stdout=log, stderr=log
            )
        deadline = time.monotonic() + timeout
        while True:
            found = re.search(r"Uvicorn running on http://(\[[^\]]+\]|[^:]+):(\d+)", self.text())
            if found:
                self.host, self.port = found.group(1), int(found.group(2))
                return self
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"steerable serve did not start:\n{self.text()}")
            time.sleep(0.05)

    def text(self) -> str:
        """What it logged so far."""
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def kill(self, sig: int = signal.SIGTERM) -> int:
        """End it (SIGTERM: a clean shutdown); its exit status."""
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            return self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait(timeout=10)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[list[Served]]:
    """Servers a test started; all ended after it."""
    started: list[Served] = []
    yield started
    for server in started:
        server.kill()


def serve(
    started: list[Served], store: str, *flags: str, log: Path, env: dict[str, str] | None = None
) -> Served:
    """Start a server, registered with the ``served`` fixture so it ends with the test."""
    server = Served(store, *flags, log=log, env=env)
    started.append(server)
    return server.start()


def cli(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``steerable ARGV`` run to its end."""
    return subprocess.run(
        [sys.executable, "-m", "steerable.cli", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


# -- Postgres: a database of the test's own, not migrated -----------------------------------


def postgres_url(database: str) -> str:
    """The URL of ``database`` on the tests' Postgres server."""
    from tests.stores.postgres.support import DSN

    parts = urlsplit(DSN)
    return urlunsplit((parts.scheme, parts.netloc, f"/{database}", "", ""))


@pytest.fixture
async def empty_postgres() -> AsyncIterator[str]:
    """The URL of a new, empty Postgres database; dropped after the test."""
    from tests.stores.postgres.support import fresh_database

    async with fresh_database("steerable_serve_", migrated=False) as name:
        yield postgres_url(name)


# -- the flags ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["serve"], "required: --store"),
        (["serve", "--store", "sqlite:///x.db", "--port", "http"], "invalid int value"),
        (["serve", "--store", "nosuch://x"], "unknown store scheme"),
        (["serve", "--store", "sqlite:///x.db", "--agent", "nocolon"], "module:attribute"),
        (["serve", "--store", "sqlite:///x.db", "--agent", "no.such.mod:A"], "cannot import"),
        (
            ["serve", "--store", "sqlite:///x.db", "--agent", "examples.agents.two_tools:nope"],
            "no attr",
        ),
        (
            ["serve", "--store", "sqlite:///x.db", "--agent", "examples.agents.two_tools:work"],
            "not an",
        ),
        (["serve", "--store", "sqlite:///x.db", "--host", "0.0.0.0"], "--insecure-no-auth"),
        (["serve", "--store", "sqlite:///x.db", "--tokens", "/no/such/file"], "cannot read"),
        (["serve", "--store", "sqlite:///x.db", "--lease", "0"], "--lease"),
        (["serve", "--store", "sqlite:///x.db", "--cors-origin", "https://a.example/"], "--cors"),
        (["migrate", "--store", "nosuch://x"], "unknown store scheme"),
        (["migrate"], "required: --store"),
    ],
)
def test_a_bad_flag_is_a_line_or_two_and_status_2(
    argv: list[str], says: str, tmp_path: Path
) -> None:
    done = cli(*argv)
    assert done.returncode == 2, done.stderr
    assert says in done.stderr
    assert "Traceback" not in done.stderr
    assert 1 <= len(done.stderr.strip().splitlines()) <= 2, done.stderr
    assert not (ROOT / "x.db").exists()  # nothing was opened


def test_tokens_are_lines_or_json_and_a_tenant_is_checked(tmp_path: Path) -> None:
    lines = tmp_path / "tokens"
    lines.write_text("# ops\nt-1 acme\n\n  t-2   globex  \n")
    assert load_tokens(str(lines)) == {"t-1": "acme", "t-2": "globex"}
    as_json = tmp_path / "tokens.json"
    as_json.write_text('{"t-1": "acme", "t-3": "a.b_c-d"}')
    assert load_tokens(str(as_json)) == {"t-1": "acme", "t-3": "a.b_c-d"}
    for text, says in [
        ("t-1 acme\nt-1 globex\n", "twice"),
        ("t-1 no/slash\n", "a tenant is"),
        ("t-1\n", "one `token tenant`"),
        ("t-1 acme extra\n", "one `token tenant`"),
        ('{"t-1": 3}', "a tenant is"),
        ("[1]", "one `token tenant`"),
        ("{oops", "not valid JSON"),
        ("# nothing\n", "no tokens"),
        (f"t-1 {'x' * 65}\n", "a tenant is"),
    ]:
        bad = tmp_path / "bad"
        bad.write_text(text)
        with pytest.raises(UsageError, match=re.escape(says)):
            load_tokens(str(bad))


# -- serving --------------------------------------------------------------------------------


async def _one_turn(url: str, token: str | None = None) -> dict[str, object]:
    from steerable.service.client import Client

    async with Client(url, token=token) as client:
        sent = await client.send("s1", "hello")
        return await client.turn("s1", sent.turn, wait=30)


async def test_serve_on_sqlite_answers_a_turn_with_the_demo_agent(
    tmp_path: Path, served: list[Served]
) -> None:
    server = serve(served, f"sqlite:///{tmp_path / 's.db'}", log=tmp_path / "serve.log")
    turn = await _one_turn(server.url)
    assert turn["state"] == "completed"
    assert turn["output"] == "answered: hello"
    # SIGTERM: a clean shutdown (uvicorn raises the signal again once it is done)
    assert server.kill() in (0, -signal.SIGTERM)
    assert "Application shutdown complete" in server.text()


async def test_cors_origin_lets_the_pages_of_that_origin_call_the_api(
    tmp_path: Path, served: list[Served]
) -> None:
    page, other = "https://app.example", "https://elsewhere.example"
    store = f"sqlite:///{tmp_path / 'cors.db'}"
    server = serve(served, store, "--cors-origin", page, log=tmp_path / "serve.log")
    preflight = {
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type",
    }
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
        allowed = await http.options(
            "/v1/sessions/s/messages", headers={**preflight, "Origin": page}
        )
        refused = await http.options(
            "/v1/sessions/s/messages", headers={**preflight, "Origin": other}
        )
        read = await http.get("/healthz", headers={"Origin": page})
    assert allowed.headers.get("access-control-allow-origin") == page
    assert "access-control-allow-origin" not in refused.headers
    assert read.headers.get("access-control-allow-origin") == page


async def test_serve_runs_the_agent_agent_names(tmp_path: Path, served: list[Served]) -> None:
    server = serve(
        served,
        f"sqlite:///{tmp_path / 's.db'}",
        "--agent",
        "examples.agents.two_tools:AGENT",
        log=tmp_path / "serve.log",
        env={"STEERABLE_TOOL_SECONDS": "0.05"},
    )
    from steerable.service.client import Client

    async with Client(server.url) as client:
        sent = await client.send("s1", "hello")
        done = await client.turn("s1", sent.turn, wait=30)
        assert (done["state"], done["steps"]) == ("completed", 3)  # two tool calls, then this
        assert done["output"] == "answered: hello"


async def test_tokens_make_tenants_and_a_wrong_token_is_refused(
    tmp_path: Path, served: list[Served]
) -> None:
    from steerable.service.client import Client, NotFound, Unauthorized

    tokens = tmp_path / "tokens"
    tokens.write_text("secret-a acme\nsecret-b globex\n")
    server = serve(
        served,
        f"sqlite:///{tmp_path / 's.db'}",
        "--tokens",
        str(tokens),
        log=tmp_path / "serve.log",
    )
    assert (await _one_turn(server.url, "secret-a"))["state"] == "completed"
    for token in (None, "wrong"):
        async with Client(server.url, token=token) as client:
            with pytest.raises(Unauthorized):
                await client.status("s1")
    async with Client(server.url, token="secret-b") as other:
        with pytest.raises(NotFound):
            await other.status("s1")  # acme's session is no session of globex's


async def test_a_non_loopback_host_serves_without_tokens_only_when_told(
    tmp_path: Path, served: list[Served]
) -> None:
    flags = ("--host", "0.0.0.0", "--insecure-no-auth")
    server = serve(served, f"sqlite:///{tmp_path / 's.db'}", *flags, log=tmp_path / "serve.log")
    assert (await _one_turn(server.url))["state"] == "completed"


async def test_postgres_is_migrated_by_migrate_never_by_serve(
    tmp_path: Path, served: list[Served], empty_postgres: str
) -> None:
    done = cli("serve", "--store", empty_postgres, "--port", "0")
    assert done.returncode == 1
    assert "steerable migrate --store URL" in done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr

    first = cli("migrate", "--store", empty_postgres)
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("applied migration step(s) 1, ")
    again = cli("migrate", "--store", empty_postgres)
    assert (again.returncode, again.stdout) == (0, "up to date: nothing to apply\n")

    # Two replicas over the one database: a send through one, its turn's view through both.
    one = serve(served, empty_postgres, "--replica-id", "one", log=tmp_path / "one.log")
    two = serve(served, empty_postgres, "--replica-id", "two", log=tmp_path / "two.log")
    turn = await _one_turn(one.url)
    assert turn["state"] == "completed"
    from steerable.service.client import Client

    async with Client(two.url) as client:
        seen = await client.turn("s1", str(turn["id"]))
    assert seen["output"] == "answered: hello"
    assert seen["holder"] in ("one", "two", None)


def test_migrate_on_sqlite_has_nothing_to_apply(tmp_path: Path) -> None:
    done = cli("migrate", "--store", f"sqlite:///{tmp_path / 's.db'}")
    assert (done.returncode, done.stdout) == (
        0,
        "sqlite: nothing to apply (it sets up its own tables)\n",
    )


def test_an_unreachable_database_is_one_line_and_status_1(tmp_path: Path) -> None:
    done = cli("migrate", "--store", "postgresql://postgres@127.0.0.1:1/nothing")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.parametrize(
    ("source", "says"),
    [
        ("def broken(:\n", "SyntaxError"),
        ("raise RuntimeError('no config')\n", "RuntimeError: no config"),
    ],
)
def test_an_agent_module_that_fails_to_import_is_one_line_and_status_2(
    source: str, says: str, tmp_path: Path
) -> None:
    module = tmp_path / "agent.py"
    module.write_text(source)
    done = cli("serve", "--store", "sqlite:///x.db", "--agent", f"{module}:AGENT")
    assert done.returncode == 2, done.stderr
    assert "cannot import" in done.stderr and says in done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_token_the_client_cannot_send_is_refused_in_the_tokens_file(tmp_path: Path) -> None:
    bad = tmp_path / "tokens"
    bad.write_text("t\u00e9 acme\n")
    with pytest.raises(UsageError, match="printable ASCII"):
        load_tokens(str(bad))
