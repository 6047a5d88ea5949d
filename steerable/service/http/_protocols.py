"""The open protocols an app speaks beside its own routes: A2A, MCP and AG-UI.

Each is a package of its own under :mod:`steerable.service.http` (``a2a``, ``mcp``,
``agui``), built on the protocol's official Python package (an extra of steerable's), with
one function, ``mount(app, context)``, that adds its routes to the app: under ``/v1/`` where
they carry a tenant's data, so the bearer gate, the body limit and the tenants' bounds apply
to them as to the API's own routes (docs/protocols.md).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from fastapi import FastAPI

from steerable._extras import PROTOCOLS
from steerable.errors import UsageError
from steerable.service.http._context import Context

__all__ = ["PROTOCOLS", "check_protocols", "mount_protocols"]


def check_protocols(names: Sequence[str]) -> tuple[str, ...]:
    """The protocols named, each once, in order; a :class:`UsageError` for an unknown one."""
    if isinstance(names, str):
        raise UsageError(f"`protocols` is a list of names, not the str {names!r}")
    found: list[str] = []
    for name in names:
        if name not in PROTOCOLS:
            known = ", ".join(PROTOCOLS)
            raise UsageError(f"no protocol named {name!r} (there are: {known})")
        if name not in found:
            found.append(name)
    return tuple(found)


def mount_protocols(app: FastAPI, context: Context, names: Sequence[str]) -> None:
    """Add each named protocol's routes to ``app``."""
    for name in names:
        module_name, extra = PROTOCOLS[name]
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise UsageError(
                f"the {name} protocol needs its package: pip install 'steerable[{extra}]' ({exc})"
            ) from None
        module.mount(app, context)
