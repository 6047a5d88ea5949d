"""Stores from URLs: each scheme opens its store over a pool of its own; bad URLs are told.

Postgres and MariaDB run for real: a fresh database each, migrated through ``migrate_url``
(what ``steerable migrate --store URL`` runs) and then served through ``open_url``.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from urllib.parse import urlsplit

import aiomysql  # type: ignore[import-untyped]
import asyncpg  # type: ignore[import-untyped]
import pytest

from steerable.errors import UsageError
from steerable.messages import user
from steerable.service_store import Input
from steerable.stores import mysql, postgres
from steerable.stores.memory import MemoryStore
from steerable.stores.sqlite import SQLiteStore
from steerable.stores.url import migrate_url, open_url
from tests.stores.mysql import server as mysql_server
from tests.stores.postgres.support import DSN


@pytest.mark.parametrize(
    "url",
    [
        "",
        "nothing",
        "redis://localhost/0",
        "sqlite://",
        "postgresql://h/db?pool=x",
        "postgresql://h/db?pool=0",
        "mysql://root@127.0.0.1:3306",
        "mongodb://127.0.0.1:1/",
    ],
)
async def test_a_bad_store_url_is_a_usage_error(url: str) -> None:
    with pytest.raises(UsageError):
        async with open_url(url):
            pass


async def test_memory_and_sqlite_urls(tmp_path: Path) -> None:
    async with open_url("memory:") as store:
        assert isinstance(store, MemoryStore)
    path = tmp_path / "a.db"
    async with open_url(f"sqlite:///{path}") as store:
        assert isinstance(store, SQLiteStore)
        await store.save("s", [user("kept")], at=0)
    assert await migrate_url(f"sqlite:///{path}") == []
    async with SQLiteStore(path) as again:
        assert [m.text for m in await again.messages("s")] == ["kept"]


async def _serves(url: str) -> None:
    async with open_url(url) as store:
        accepted = await store.enqueue("s", Input("send", "hi", "x"))
        assert accepted.seq == 1
        assert (await store.status("s")).queued == 1


async def test_a_postgres_url_migrates_and_serves() -> None:
    name = f"steerable_url_{secrets.token_hex(4)}"
    admin = await asyncpg.connect(DSN)
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        parts = urlsplit(DSN)
        url = f"postgresql://{parts.netloc}/{name}?pool=2"
        assert await migrate_url(url) == [m.version for m in postgres.MIGRATIONS]
        assert await migrate_url(url) == []
        await _serves(url)
    finally:
        await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        await admin.close()


async def test_a_mysql_url_migrates_and_serves() -> None:
    name = f"steerable_url_{secrets.token_hex(4)}"
    admin = await aiomysql.connect(
        host=mysql_server.HOST,
        port=mysql_server.PORT,
        user=mysql_server.USER,
        password=mysql_server.PASSWORD,
    )
    async with admin.cursor() as cursor:
        await cursor.execute(f"CREATE DATABASE `{name}`")
    try:
        auth = mysql_server.USER + (f":{mysql_server.PASSWORD}" if mysql_server.PASSWORD else "")
        url = f"mysql://{auth}@{mysql_server.HOST}:{mysql_server.PORT}/{name}?pool=2"
        assert await migrate_url(url) == [m.version for m in mysql.MIGRATIONS]
        await _serves(url)
    finally:
        async with admin.cursor() as cursor:
            await cursor.execute(f"DROP DATABASE `{name}`")
        admin.close()
