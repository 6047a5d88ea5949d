"""Bad input gets a clear error of steerable's own type, and loses nothing."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from steerable import (
    CorruptRecord,
    InvalidMessage,
    Message,
    Runner,
    ScriptedModel,
    Spec,
    Steer,
    SteerableError,
    StoreUnavailable,
    Text,
    UsageError,
    open_session,
    user,
)
from steerable.stores.memory import MemoryStore
from steerable.stores.sqlite import SQLiteStore


async def test_an_unwritable_sqlite_path_is_store_unavailable_naming_the_path(
    tmp_path: Path,
) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    if os.access(locked, os.W_OK):  # root ignores permissions: use a path under a file
        target = tmp_path / "a-file"
        target.write_text("x")
        path = target / "sessions.db"
    else:
        path = locked / "sessions.db"
    with pytest.raises(StoreUnavailable, match=str(path)):
        async with SQLiteStore(path):
            pass


async def test_a_file_that_is_not_a_database_is_store_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("these are my notes, not a database" * 100)
    with pytest.raises(StoreUnavailable, match=r"notes\.txt"):
        async with SQLiteStore(path):
            pass
    assert path.read_text().startswith("these are my notes")


async def test_a_corrupted_row_is_a_corrupt_record_naming_it_and_the_rest_is_intact(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    async with SQLiteStore(path) as store:
        await store.save("s", [user("one"), user("two"), user("three")], at=0)
        await store.save("other", [user("fine")], at=0)
    with sqlite3.connect(path) as db:
        db.execute(
            'UPDATE steerable_messages SET body = \'{"v":1,"role":\' WHERE position = 1'
            " AND session = 's'"
        )
    async with SQLiteStore(path) as store:
        with pytest.raises(CorruptRecord, match=r"session 's', position 1"):
            await store.messages("s")
        assert [m.text for m in await store.messages("other")] == ["fine"]
    with sqlite3.connect(path) as db:
        rows = db.execute(
            "SELECT body FROM steerable_messages WHERE session='s' ORDER BY position"
        ).fetchall()
    assert len(rows) == 3 and "one" in rows[0][0] and "three" in rows[2][0]


async def test_a_row_from_a_newer_codec_is_a_corrupt_record_saying_so(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with SQLiteStore(path) as store:
        await store.save("s", [user("one")], at=0)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE steerable_messages SET body = replace(body, '\"v\":1', '\"v\":9')")
    async with SQLiteStore(path) as store:
        with pytest.raises(CorruptRecord, match="unknown codec version 9"):
            await store.messages("s")


@pytest.mark.parametrize("bad", [42, None, b"bytes", ""])
async def test_a_session_id_that_is_not_a_string_is_a_usage_error(bad: Any) -> None:
    with pytest.raises(UsageError, match="session id"):
        open_session(bad, MemoryStore())


async def test_usage_errors_are_steerable_errors_and_value_errors() -> None:
    assert issubclass(UsageError, SteerableError) and issubclass(UsageError, ValueError)
    assert issubclass(StoreUnavailable, SteerableError)


def test_a_message_with_a_bad_role_or_part_is_invalid() -> None:
    bad_role: Any = "system"
    with pytest.raises(InvalidMessage, match="role"):
        Message(bad_role, (Text("x"),))
    bad_part: Any = "just a string"
    with pytest.raises(InvalidMessage, match="content part"):
        Message("user", (bad_part,))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_steps": 0}, "max_steps"),
        ({"steers_per_turn": -1}, "steers_per_turn"),
        ({"pattern": "plan-and-execute"}, "unknown pattern"),
        ({"session": "s"}, "session"),
        ({"tools": ["not a function"]}, "a tool is a function"),
    ],
)
def test_a_bad_spec_is_a_usage_error(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(UsageError, match=match):
        Spec(**kwargs)


async def test_bad_messages_are_a_usage_error() -> None:
    bad: Any = [{"role": "user", "content": "hi"}]
    with pytest.raises(UsageError, match="Message objects"):
        Runner.start(Spec(), bad, ScriptedModel(["x"]))


async def test_a_message_that_cannot_be_stored_fails_the_run_and_stores_nothing_of_it() -> None:
    store = MemoryStore()
    session = open_session("s", store)
    await Runner.run(Spec(session=session), "fine", ScriptedModel(["ok"]))
    messages = [*await session.messages(), user("lone \ud800 surrogate")]
    result = await Runner.run(Spec(session=session), messages, ScriptedModel(["never"]))
    assert result.reason == "failed" and isinstance(result.error, InvalidMessage)
    assert [m.text for m in await store.messages("s")] == ["fine", "ok"]


def test_an_id_holding_nul_is_refused_where_it_is_made() -> None:
    """Ids are keys in every store (a Postgres text key cannot hold NUL): one rule for all."""
    with pytest.raises(InvalidMessage, match="without NUL"):
        user("x", id="a\x00b")
    with pytest.raises(UsageError, match="without NUL"):
        Steer("x", "s\x00")
    with pytest.raises(UsageError, match="without NUL"):
        open_session("s\x00", MemoryStore())
    assert user("text may hold \x00", id="plain").text == "text may hold \x00"
