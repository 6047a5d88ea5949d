"""README.md stays true: its quick start runs, and `steerable demo` and `--help` work."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_quick_start_runs_as_written(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    code = re.findall(r"```python\n(.*?)```", readme, re.S)[0]
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "['use Celsius']" in done.stdout


def test_steerable_demo_hands_the_steer_over_exactly_once() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "steerable.cli", "demo"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SIGKILL: True" in done.stdout
    assert "0 left in the store; the steer is in the transcript 1 time(s)" in done.stdout
    assert "FAILED" not in done.stdout


def test_steerable_help_lists_the_commands() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "steerable.cli", "--help"], capture_output=True, text=True
    )
    assert done.returncode == 0
    assert "demo" in done.stdout


def test_the_service_example_runs_as_written(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    code = next(c for c in re.findall(r"```python\n(.*?)```", readme, re.S) if "Service(" in c)
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "steer went to turn True",
        "completed answered: plan my week | skip friday",
    ]


def test_serving_over_http_runs_as_written(tmp_path: Path) -> None:
    """The section's commands: serve on SQLite, the client's example against it, and the
    Postgres replicas' migrate and serve lines (on a database of this test's own)."""
    import asyncio
    import secrets
    import shlex

    from tests.cli.test_serve import Served, postgres_url
    from tests.stores.postgres.support import admin

    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Serving over HTTP", 1)[1].split("\n## ", 1)[0]
    commands = [
        shlex.split(line.removeprefix(".venv/bin/"))
        for block in re.findall(r"```sh\n(.*?)```", section, re.S)
        for line in block.splitlines()
        if line.strip()
    ]
    one, chat, migrate, *replicas = commands
    assert one[:2] == ["steerable", "serve"] and chat[:3] == ["steerable", "chat", "--url"]
    store = one[one.index("--store") + 1]
    sqlite = Served(store, log=tmp_path / "sqlite.log", cwd=tmp_path).start()
    try:
        code = re.findall(r"```python\n(.*?)```", section, re.S)[0]
        code = code.replace("http://127.0.0.1:8000", sqlite.url)
        assert chat[3] == "http://127.0.0.1:8000"
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60
        )
    finally:
        sqlite.kill()
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "steer went to turn True",
        "completed answered: plan my week | skip friday",
    ]

    database = f"steerable_readme_{secrets.token_hex(6)}"
    asyncio.run(admin(f'CREATE DATABASE "{database}"'))
    url, servers = postgres_url(database), list[Served]()
    try:
        written = migrate[migrate.index("--store") + 1]
        argv = [a.replace(written, url) for a in migrate[1:]]
        applied = subprocess.run(
            [sys.executable, "-m", "steerable.cli", *argv], capture_output=True, text=True
        )
        assert applied.returncode == 0, applied.stderr
        (tmp_path / "tokens.txt").write_text("secret-a acme\n")
        for line in replicas:
            assert line[:4] == ["steerable", "serve", "--store", written]
            flags = line[4:]
            flags[flags.index("--port") + 1] = "0"  # any free port: the test's own
            log = tmp_path / f"replica-{len(servers)}.log"
            servers.append(Served(url, *flags, log=log, cwd=tmp_path).start())
        assert len(servers) == 2
    finally:
        for server in servers:
            server.kill()
        asyncio.run(admin(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))
