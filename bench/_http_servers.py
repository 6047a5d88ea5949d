"""The servers of ``bench.http``: ``steerable serve`` replicas, nginx before three, and
LangGraph's Agent Server in its local mode (``langgraph dev``).

Each context manager starts its processes, waits until they answer, yields where they are,
and ends them (by their own pids) on exit. A server that cannot start raises
:class:`Unavailable` with the error it gave.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path

import httpx

from bench._servers import Unavailable

ROOT = Path(__file__).resolve().parent.parent
GRAPH = Path(__file__).resolve().parent / "_http_langgraph_graph.py"
# The console script beside this interpreter (the package has no __main__).
STEERABLE = [str(Path(sys.executable).parent / "steerable")]
AGENT = "bench._http_agent:agent"


def free_port() -> int:
    """A TCP port nobody listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def ready(url: str, process: subprocess.Popen[bytes], log: Path, limit: float) -> None:
    """Wait until ``url`` answers 200, or raise :class:`Unavailable` with the log's end."""
    deadline = time.monotonic() + limit
    async with httpx.AsyncClient(timeout=2) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                break
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get(url)).status_code == 200:
                    return
            await asyncio.sleep(0.1)
    raise Unavailable(f"{url} did not answer: " + _tail(log))


def _tail(log: Path) -> str:
    lines = log.read_text(errors="replace").strip().splitlines()[-6:] if log.exists() else []
    return " / ".join(lines)[-600:]


def spawn(command: list[str], cwd: Path, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Start ``command``, its output to ``log``."""
    with log.open("wb") as out:
        return subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)


def _end(processes: Sequence[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def migrate(url: str) -> None:
    """``steerable migrate --store URL``, or :class:`Unavailable` with what it said."""
    done = subprocess.run(
        [*STEERABLE, "migrate", "--store", url], cwd=ROOT, capture_output=True, text=True
    )
    if done.returncode:
        raise Unavailable(f"steerable migrate failed: {done.stderr.strip()[-300:]}")


@contextlib.asynccontextmanager
async def replicas(
    store: str, count: int, root: Path, tag: str, tool: float
) -> AsyncIterator[list[str]]:
    """``count`` ``steerable serve`` processes over ``store`` (the demo agent, its tool of
    ``tool`` seconds): their base URLs."""
    env = {**os.environ, "BENCH_HTTP_TOOL": str(tool)}
    processes: list[subprocess.Popen[bytes]] = []
    urls: list[str] = []
    try:
        for index in range(count):
            port = free_port()
            log = root / f"serve-{tag}-{index}.log"
            command = [*STEERABLE, "serve", "--store", store, "--port", str(port)]
            command += ["--replica-id", f"{tag}-{index}", "--agent", AGENT]
            processes.append(spawn(command, ROOT, env, log))
            urls.append(f"http://127.0.0.1:{port}")
            await ready(urls[-1] + "/readyz", processes[-1], log, 30)
        yield urls
    finally:
        _end(processes)


NGINX = """
worker_processes 1;
error_log {root}/nginx-error.log warn;
pid {root}/nginx.pid;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    upstream steerable {{ {servers} keepalive 64; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://steerable;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 120s;
        }}
    }}
}}
"""


@contextlib.contextmanager
def _nginx_process(root: Path, urls: Sequence[str], port: int) -> Iterator[subprocess.Popen[bytes]]:
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(binary).exists():
        raise Unavailable("nginx is not installed")
    servers = " ".join(f"server {u.removeprefix('http://')};" for u in urls)
    conf = root / "nginx.conf"
    conf.write_text(NGINX.format(root=root, servers=servers, port=port))
    log = root / "nginx.log"
    with log.open("wb") as out:
        command = [binary, "-p", str(root), "-c", str(conf), "-e", str(root / "nginx-start.log")]
        process = subprocess.Popen(
            [*command, "-g", "daemon off;"], stdout=out, stderr=subprocess.STDOUT
        )
    try:
        yield process
    finally:
        _end([process])


@contextlib.asynccontextmanager
async def nginx(root: Path, urls: Sequence[str]) -> AsyncIterator[str]:
    """nginx on a port of its own, round robin over ``urls``: its base URL."""
    port = free_port()
    with _nginx_process(root, urls, port) as process:
        url = f"http://127.0.0.1:{port}"
        await ready(url + "/readyz", process, root / "nginx-start.log", 10)
        yield url


def langgraph_binary() -> str | None:
    """The ``langgraph`` command: ``BENCH_LANGGRAPH``, else the one on ``PATH``."""
    return os.environ.get("BENCH_LANGGRAPH") or shutil.which("langgraph")


@contextlib.asynccontextmanager
async def langgraph_dev(root: Path, tool: float, jobs: int) -> AsyncIterator[tuple[str, Path]]:
    """``langgraph dev`` serving the scripted graph: its base URL and its request log."""
    binary = langgraph_binary()
    if binary is None or shutil.which(binary) is None:
        raise Unavailable(
            "the `langgraph` command is not found (pip install 'langgraph-cli[inmem]' in a"
            " venv of its own; BENCH_LANGGRAPH=that venv's bin/langgraph)"
        )
    home = root / "langgraph"
    home.mkdir()
    (home / "langgraph.json").write_text(
        f'{{"dependencies": ["."], "graphs": {{"agent": "{GRAPH}:graph"}}}}'
    )
    requests = root / "langgraph-requests.jsonl"
    env = {
        **os.environ,
        "BENCH_HTTP_LOG": str(requests),
        "BENCH_HTTP_TOOL": str(tool),
        "LANGSMITH_TRACING": "false",
        "LANGGRAPH_CLI_NO_ANALYTICS": "1",
    }
    port = free_port()
    log = root / "langgraph.log"
    command = [binary, "dev", "--no-browser", "--no-reload", "--port", str(port)]
    command += ["--n-jobs-per-worker", str(jobs)]
    process = spawn(command, home, env, log)
    try:
        url = f"http://127.0.0.1:{port}"
        await ready(url + "/ok", process, log, 60)
        yield url, requests
    finally:
        _end([process])
