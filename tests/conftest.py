"""Test-wide guards.

No test reaches a hosted model: every connection to a host that is not this machine fails
the test that makes it, and the provider keys are unset, so a test that forgot its local
``base_url`` fails at once instead of calling (and paying) a real API.

A database server that the test setup runs on another host can be let through by naming
the host in ``STEERABLE_TEST_ALLOWED_HOSTS`` (comma-separated host names or addresses).
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest

_KEYS = (
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_ORG_ID",
    "OPENAI_PROJECT_ID",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "STEERABLE_MODEL",
)


class HostedNetworkBlocked(AssertionError):
    """A test tried to connect beyond this machine."""


def _allowed_hosts() -> set[str]:
    extra = os.environ.get("STEERABLE_TEST_ALLOWED_HOSTS", "")
    return {h.strip().lower() for h in extra.split(",") if h.strip()}


def _is_local(host: object) -> bool:
    if not isinstance(host, str):
        return False
    name = host.strip("[]").split("%", 1)[0].lower()
    if name in ("localhost", "localhost.localdomain") or name in _allowed_hosts():
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _checker(attempts: list[str]) -> Callable[[object], None]:
    def check(address: object) -> None:
        if isinstance(address, str | bytes):  # a Unix socket path
            return
        if isinstance(address, tuple) and address and _is_local(address[0]):
            return
        attempts.append(repr(address))
        raise HostedNetworkBlocked(
            f"a test tried to connect to {address!r}; tests only talk to servers on loopback"
        )

    return check


@pytest.fixture(autouse=True)
def hosted_network_attempts(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Refuse connections (and name lookups) beyond loopback; unset the providers' keys.

    The refusal raises in the code that connects; a test whose code swallows that error
    (a run that fails, as a run does when its model raises) still fails, at teardown. The
    fixture's value is the list of refused addresses: a test of the guard clears it.
    """
    for key in _KEYS:
        monkeypatch.delenv(key, raising=False)
    attempts: list[str] = []
    _check = _checker(attempts)
    connect = socket.socket.connect
    connect_ex = socket.socket.connect_ex
    getaddrinfo = socket.getaddrinfo

    def guarded_connect(self: socket.socket, address: Any) -> None:
        _check(address)
        connect(self, address)

    def guarded_connect_ex(self: socket.socket, address: Any) -> int:
        _check(address)
        return connect_ex(self, address)

    def guarded_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host is not None:
            _check((host.decode() if isinstance(host, bytes) else host, 0))
        return getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    monkeypatch.setattr(socket.socket, "connect_ex", guarded_connect_ex)
    monkeypatch.setattr(socket, "getaddrinfo", guarded_getaddrinfo)
    yield attempts
    monkeypatch.undo()
    if attempts:
        pytest.fail(f"the test tried to reach beyond loopback: {', '.join(attempts)}")


SLOW_TIMEOUT = 300
"""Seconds a test marked ``slow`` may take (pytest-timeout's 120 for the others): a test that
kills a worker process ten times over on SecantusDB, or starts a framework's import twice, took
over 120 s on a CI machine with four workers busy."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Give each ``slow`` test without a timeout of its own :data:`SLOW_TIMEOUT`."""
    for item in items:
        if item.get_closest_marker("slow") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT))
