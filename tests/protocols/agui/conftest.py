"""Fixtures of the AG-UI tests: in-process servers (the HTTP tests' :class:`LiveServer`)."""

from __future__ import annotations

from tests.service.http.conftest import serve_app

__all__ = ["serve_app"]
