"""nginx in front of replicas, for the load-balancer tests: a config of the test's own, run
as the test's own process (``daemon off``), with every path under the test's directory.

::

    with Nginx([8001, 8002, 8003], tmp_path) as balancer:
        balancer.url                 # http://127.0.0.1:PORT, round robin over the three
        response.headers[UPSTREAM]   # which replica answered: "127.0.0.1:8002"

The config is what the service needs behind a proxy (docs/http.md): HTTP/1.1 to the
upstream, no response buffering (the event stream's frames go out as they come), a long
read timeout (a stream is quiet between keep-alives). A replica that refuses connections
is marked failed and the request goes to the next one.
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

__all__ = ["UPSTREAM", "Nginx", "nginx_binary"]

UPSTREAM = "X-Upstream"
"""The response header nginx adds: the address of the replica that answered."""


def nginx_binary() -> str | None:
    """The nginx executable (on PATH, or Debian's /usr/sbin), or None."""
    found = shutil.which("nginx")
    if found is None and os.access("/usr/sbin/nginx", os.X_OK):
        found = "/usr/sbin/nginx"
    return found


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def config(upstreams: list[int], port: int, directory: Path) -> str:
    """The nginx config: round robin over ``upstreams`` on loopback, listening on ``port``."""
    servers = "\n".join(
        f"        server 127.0.0.1:{p} max_fails=1 fail_timeout=60s;" for p in upstreams
    )
    # Run as root, nginx would switch its workers to `nobody`; the test's user owns the paths.
    user = ""
    if os.geteuid() == 0:
        user = f"user {pwd.getpwuid(os.getuid()).pw_name} {grp.getgrgid(os.getgid()).gr_name};"
    temp = "\n".join(
        f"    {kind}_temp_path {directory / kind};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    return f"""{user}
worker_processes 1;
pid {directory / "nginx.pid"};
error_log {directory / "error.log"} info;
events {{
    worker_connections 512;
}}
http {{
    log_format upstream '$remote_addr "$request" $status upstream=$upstream_addr';
    access_log {directory / "access.log"} upstream;
{temp}
    upstream replicas {{
{servers}
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://replicas;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_buffering off;
            proxy_cache off;
            proxy_connect_timeout 2s;
            proxy_read_timeout 1h;
            proxy_send_timeout 1h;
            proxy_next_upstream error timeout;
            add_header {UPSTREAM} $upstream_addr always;
        }}
    }}
}}
"""


class Nginx:
    """One nginx process over ``upstreams`` (ports on 127.0.0.1), its files in ``directory``."""

    def __init__(self, upstreams: list[int], directory: Path, *, binary: str | None = None):
        found = binary or nginx_binary()
        if found is None:
            raise RuntimeError("nginx is not installed")
        self.binary = found
        self.directory = directory
        self.port = _free_port()
        self.conf = directory / "nginx.conf"
        self.process: subprocess.Popen[bytes] | None = None
        directory.mkdir(parents=True, exist_ok=True)
        self.conf.write_text(config(upstreams, self.port, directory), encoding="utf-8")

    @property
    def url(self) -> str:
        """The base URL clients use."""
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> Nginx:
        """Start nginx in the foreground of its own process; return once it accepts."""
        command = [self.binary, "-p", str(self.directory), "-c", str(self.conf)]
        command += ["-e", str(self.directory / "error.log"), "-g", "daemon off;"]
        with (self.directory / "nginx.out").open("ab") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=out)
        deadline = time.monotonic() + timeout
        while True:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), 1),
            ):
                return self
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"nginx did not start:\n{self.log()}")
            time.sleep(0.05)

    def log(self) -> str:
        """nginx's output and error log, for failure messages."""
        parts = []
        for name in ("nginx.out", "error.log"):
            path = self.directory / name
            if path.exists():
                parts.append(path.read_text(encoding="utf-8", errors="replace")[-4000:])
        return "\n".join(parts)

    def stop(self) -> None:
        """A fast shutdown (SIGTERM: the master ends its workers), then reap it."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    def __enter__(self) -> Nginx:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()
