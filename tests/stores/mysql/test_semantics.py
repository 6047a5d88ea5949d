"""What the MySQL store adds to the contract: ids, the stored form, pools.

The conflict, the corrupt row and the driver boundary are the suite's (test_contract.py,
tests/stores/test_packages.py); the migrations are test_migrations.py.
"""

from __future__ import annotations

import pytest

from steerable import codec
from steerable.errors import (
    InvalidMessage,
    TranscriptConflict,
    UsageError,
)
from steerable.messages import Message, ToolCall, new_id, user
from steerable.store import Steer
from steerable.stores.mysql import MySQLStore
from tests.stores.mysql import server


def _sid() -> str:
    return f"mysql-{new_id()}"


async def test_the_stored_body_is_the_codec_text_in_a_text_column(store: MySQLStore) -> None:
    sid = _sid()
    message = Message("assistant", (ToolCall("c", "f", '{"z":1,"a":[1, 2],"z":3}'),))
    await store.save(sid, [user("é 😀 \x00"), message], at=0)
    rows = await server.query(
        "SELECT body FROM steerable_messages WHERE session = %s ORDER BY position", (sid,)
    )
    assert rows[1][0] == codec.encode(message)
    assert '"args":"{\\"z\\":1,\\"a\\":[1, 2],\\"z\\":3}"' in rows[1][0]
    types = await server.query(
        "SELECT TABLE_NAME, DATA_TYPE FROM information_schema.COLUMNS"
        " WHERE TABLE_SCHEMA = %s AND COLUMN_NAME = 'body'",
        (server.DATABASE,),
    )
    assert {t for _, t in types} == {"longtext"}


async def test_reads_are_current_on_a_pool_without_autocommit() -> None:
    # a read with autocommit off opens a snapshot the server does not flag, and aiomysql's
    # pool keeps the connection with it: the next read on it would see the past
    sid = _sid()
    async with (
        server.open_store(server.DATABASE, maxsize=1, autocommit=False) as reader,
        server.open_store(server.DATABASE, autocommit=True) as writer,
    ):
        assert await reader.messages(sid) == []
        assert await reader.steers(sid) == []
        await writer.save(sid, [user("a")], at=0)
        await writer.steer(sid, Steer("s"))
        assert [m.text for m in await reader.messages(sid)] == ["a"]
        assert [s.text for s in await reader.steers(sid)] == ["s"]
        await reader.steer(sid, Steer("t"))  # committed, though the pool does not autocommit
        assert [s.text for s in await writer.steers(sid)] == ["s", "t"]


async def test_a_pool_with_autocommit_and_str_results_works_too() -> None:
    sid = _sid()
    text = "astral 😀\U0001d518, combining e\u0301"
    async with server.open_store(server.DATABASE, autocommit=True, charset="utf8mb4") as store:
        await store.steer(sid, Steer(text, "s-😀"))
        taken = await store.save(sid, [user(text, id="m-😀")], at=0, take=16)
        assert taken == [Steer(text, "s-😀").message()]
        back = await store.messages(sid)
    assert [(m.id, m.text) for m in back] == [("m-😀", text), ("s-😀", text)]


async def test_a_pool_whose_connections_are_not_utf8mb4_is_refused() -> None:
    sid = _sid()
    async with server.open_store(server.DATABASE, charset="utf8") as store:
        with pytest.raises(UsageError, match="charset='utf8mb4'"):
            await store.save(sid, [user("😀")], at=0)
    assert await server.query("SELECT 1 FROM steerable_messages WHERE session = %s", (sid,)) == ()


async def test_ids_past_255_characters_are_refused_clearly(store: MySQLStore) -> None:
    sid = _sid()
    await store.save(sid, [user("255 astral characters", id="😀" * 255)], at=0)
    with pytest.raises(InvalidMessage, match="at most 255"):
        await store.save(sid, [user("x", id="i" * 256)], at=1)
    with pytest.raises(UsageError, match="at most 255"):
        await store.messages("s" * 256)
    with pytest.raises(UsageError, match="at most 255"):
        await store.steer(sid, Steer("x", "s" * 256))
    assert [m.id for m in await store.messages(sid)] == ["😀" * 255]


async def test_positions_and_limits_past_the_column_types(store: MySQLStore) -> None:
    sid = _sid()
    await store.steer(sid, Steer("s"))
    with pytest.raises(TranscriptConflict):
        await store.save(sid, [user("a")], at=2**70)
    assert len(await store.take_steers(sid, at=0, limit=2**70)) == 1
