"""A pytest plugin that points LangGraph's own saver tests at a saver of our choosing.

``scripts/upstream_langgraph.py`` loads it (``-p upstream_langgraph_plugin``) into a pytest
run over test files extracted from the langgraph repository. ``STEERABLE_UPSTREAM_TARGET``
says which saver the tests get wherever they make LangGraph's:

- ``steerable``: :class:`SteerableSaver` over a steerable store of the same kind:
  ``InMemorySaver()`` over a :class:`MemoryStore`, ``SqliteSaver.from_conn_string`` and
  ``AsyncSqliteSaver.from_conn_string`` over a :class:`SQLiteStore` in a fresh file, the
  Postgres tests' ``_saver(name)`` helper and ``AsyncPostgresSaver.from_conn_string`` over
  a :class:`PostgresStore` on a fresh database (the sync tests' pool lives on a loop of
  this plugin, in a thread, as a sync program's would).
- ``memory``: LangGraph's ``InMemorySaver`` in each of those places.
- ``own``: nothing is replaced (each test runs against the saver it was written for).

Only names are replaced, before the test modules import them; no test is changed.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

TARGET = os.environ.get("STEERABLE_UPSTREAM_TARGET", "steerable")
ROOT = Path(__file__).resolve().parent.parent


def _repo_module(name: str, relative: str) -> ModuleType:
    """A module of this repository's tests by its path: the upstream tests own ``tests``."""
    spec = importlib.util.spec_from_file_location(name, ROOT / relative)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {relative}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# -- the savers each target gives ---------------------------------------------------------


def _steerable_saver(store: Any) -> Any:
    from steerable.integrations.langgraph import SteerableSaver

    class UpstreamSaver(SteerableSaver):
        """A SteerableSaver with the no-op ``setup()`` the Postgres tests call."""

        async def setup(self) -> None:
            """Nothing to do: the store's own migrations ran."""

    return UpstreamSaver(store)


def _memory_saver() -> Any:
    from langgraph.checkpoint.memory import InMemorySaver

    class UpstreamMemorySaver(InMemorySaver):
        """InMemorySaver with the no-op ``setup()`` the Postgres tests call."""

        async def setup(self) -> None:
            """Nothing to do."""

    return UpstreamMemorySaver()


@asynccontextmanager
async def _async_postgres() -> AsyncIterator[Any]:
    """A SteerableSaver over a PostgresStore on a fresh database, dropped after."""
    from steerable.stores.postgres import PostgresStore

    support = _repo_module("_steerable_pg_support", "tests/stores/postgres/support.py")
    async with support.fresh_database("lg_upstream_") as name:
        pool = await support.create_pool(name)
        try:
            yield _steerable_saver(PostgresStore(pool))
        finally:
            await pool.close()


@contextmanager
def _sync_postgres() -> Iterator[Any]:
    """:func:`_async_postgres` for a sync test: its pool on a loop running in a thread."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    opened = _async_postgres()
    try:
        saver = asyncio.run_coroutine_threadsafe(opened.__aenter__(), loop).result()
        try:
            yield saver
        finally:
            asyncio.run_coroutine_threadsafe(opened.__aexit__(None, None, None), loop).result()
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


@contextmanager
def _sync_sqlite(conn_string: str) -> Iterator[Any]:
    from steerable.stores.sqlite import SQLiteStore

    with tempfile.TemporaryDirectory() as where:
        store = SQLiteStore(Path(where) / "saver.db")
        try:
            yield _steerable_saver(store)
        finally:
            asyncio.run(store.close())


@asynccontextmanager
async def _async_sqlite(conn_string: str) -> AsyncIterator[Any]:
    from steerable.stores.sqlite import SQLiteStore

    with tempfile.TemporaryDirectory() as where:
        async with SQLiteStore(Path(where) / "saver.db") as store:
            yield _steerable_saver(store)


@contextmanager
def _sync_memory(*args: Any) -> Iterator[Any]:
    yield _memory_saver()


@asynccontextmanager
async def _async_memory(*args: Any) -> AsyncIterator[Any]:
    yield _memory_saver()


# -- the names replaced -------------------------------------------------------------------


class _SqliteSaver:
    """Stands for ``SqliteSaver``: its ``from_conn_string`` gives the target's saver."""

    @staticmethod
    def from_conn_string(conn_string: str) -> Any:
        """The target's saver, as a context manager."""
        return _sync_sqlite(conn_string) if TARGET == "steerable" else _sync_memory()


class _AsyncSqliteSaver:
    """Stands for ``AsyncSqliteSaver``: its ``from_conn_string`` gives the target's saver."""

    @staticmethod
    def from_conn_string(conn_string: str) -> Any:
        """The target's saver, as an async context manager."""
        return _async_sqlite(conn_string) if TARGET == "steerable" else _async_memory()


class _AsyncPostgresSaver:
    """Stands for ``AsyncPostgresSaver``: its ``from_conn_string`` gives the target's saver."""

    @staticmethod
    def from_conn_string(conn_string: str, **options: Any) -> Any:
        """The target's saver, as an async context manager."""
        return _async_postgres() if TARGET == "steerable" else _async_memory()


def _memory_class() -> Any:
    from steerable.integrations.langgraph import SteerableSaver
    from steerable.stores.memory import MemoryStore

    class InMemorySteerableSaver(SteerableSaver):
        """Stands for ``InMemorySaver(serde=..., factory=...)``: over a MemoryStore."""

        def __init__(self, *, serde: Any = None, factory: Any = None) -> None:
            super().__init__(MemoryStore(), serde=serde)

    return InMemorySteerableSaver


def _patch_backends() -> None:
    """Replace LangGraph's savers by the target's, before any test module imports them."""
    import langgraph.checkpoint.memory as memory
    import langgraph.checkpoint.postgres.aio as postgres_aio
    import langgraph.checkpoint.sqlite as sqlite
    import langgraph.checkpoint.sqlite.aio as sqlite_aio

    if TARGET == "steerable":
        memory.InMemorySaver = _memory_class()  # type: ignore[misc]
    sqlite.SqliteSaver = _SqliteSaver  # type: ignore[misc,assignment]
    sqlite_aio.AsyncSqliteSaver = _AsyncSqliteSaver  # type: ignore[misc,assignment]
    postgres_aio.AsyncPostgresSaver = _AsyncPostgresSaver  # type: ignore[misc,assignment,unused-ignore]  # (no stubs without the bench extra)


if TARGET not in ("steerable", "memory", "own"):
    raise RuntimeError(f"STEERABLE_UPSTREAM_TARGET is steerable, memory or own, not {TARGET!r}")
if TARGET != "own":
    _patch_backends()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The Postgres tests' ``_saver(name)`` helper replaced by the target's, in each module."""
    if TARGET == "own":
        return
    for item in items:
        module = getattr(item, "module", None)
        if module is None or not hasattr(module, "_saver"):
            continue
        if module.__name__ == "tests.test_sync":
            steerable: Any = lambda name: _sync_postgres()  # noqa: E731
            module._saver = steerable if TARGET == "steerable" else _sync_memory
        elif module.__name__ == "tests.test_async":
            steerable = lambda name: _async_postgres()  # noqa: E731
            module._saver = steerable if TARGET == "steerable" else _async_memory
