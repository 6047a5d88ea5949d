"""The SQLite store's tool journal (:class:`steerable.store.Journaling`): one row per call.

A call is a row of ``steerable_journal`` keyed by ``(session, key)``: ``result`` NULL while
it is started and not ended, then the stored text of its result
(:func:`steerable.journal.encode_result`). Each verb is one write transaction that takes the
file's write lock up front (``BEGIN IMMEDIATE``), so its read and its write are one step for
every process sharing the file: of many begins of one key, the first to get the lock inserts
the row and every later one reads it. The journal is not fenced by the service's lease (see
:mod:`steerable.journal`): nothing here reads the session's service row.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from steerable.journal import decode_result
from steerable.messages import ToolResult

__all__ = ["BEGIN_KNOWN", "begin_calls", "end_call"]

BEGIN_KNOWN = "SELECT key, result FROM steerable_journal WHERE session = ? AND key IN ({marks})"
"""The entries a begin finds, ``{marks}`` being one ``?`` per key (its plan is tested)."""


def begin_calls(
    db: sqlite3.Connection, session: str, keys: Sequence[str]
) -> dict[str, ToolResult | None]:
    """One write transaction: read the keys' entries, insert a started one for each other."""
    if not keys:
        return {}
    db.execute("BEGIN IMMEDIATE")  # the lock before the read: else two begins both see none
    found = db.execute(
        BEGIN_KNOWN.format(marks=",".join("?" * len(keys))), (session, *keys)
    ).fetchall()
    known = {key: None if text is None else decode_result(key, text) for key, text in found}
    db.executemany(
        "INSERT INTO steerable_journal (session, key) VALUES (?, ?)",
        [(session, key) for key in keys if key not in known],
    )
    db.execute("COMMIT")
    return known


def end_call(
    db: sqlite3.Connection, session: str, key: str, result: ToolResult, text: str
) -> ToolResult:
    """One write transaction: record ``text`` as the call's result unless one is; the kept one.

    ``text`` is ``result``'s stored form, encoded by the caller before the transaction.
    """
    db.execute("BEGIN IMMEDIATE")
    db.execute(
        "INSERT INTO steerable_journal (session, key, result) VALUES (?, ?, ?)"
        " ON CONFLICT (session, key) DO UPDATE SET result = excluded.result"
        " WHERE result IS NULL",
        (session, key, text),
    )
    (kept,) = db.execute(
        "SELECT result FROM steerable_journal WHERE session = ? AND key = ?", (session, key)
    ).fetchone()
    db.execute("COMMIT")
    return result if kept == text else decode_result(key, kept)
